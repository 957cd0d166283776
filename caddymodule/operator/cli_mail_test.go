package operator

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// TestCLIMail follows e-mail that cannot be delivered as the operator meets it: My Account's
// SMTP server is down (a port where nothing listens), so the invitations the operator sends stay
// queued with the error of their first attempt; `mail list` shows them, oldest first, without
// their content; `mail drop` gives up on them, once each, and the outbox is empty again.
func TestCLIMail(t *testing.T) {
	ledgerDir := filepath.Join(t.TempDir(), "ledger")
	smtpDown := caddyproc.FreePort(t)
	key := make([]byte, 32)
	rand.Read(key)
	s := caddyproc.Start(t, fmt.Sprintf(`textgen /api/* {
		ledger %[1]s
		ollama http://127.0.0.1:1
	}
	textgen_account {
		ledger %[1]s
		public_url https://api.example.test
		smtp {
			host 127.0.0.1
			port %[2]d
			security none
			from "Textgen <no-reply@example.com>"
			timeout 5s
		}
		mail_key %[3]s
	}`, ledgerDir, smtpDown, base64.StdEncoding.EncodeToString(key)), ledgerDir)

	// Nothing yet.
	if got := caddyproc.List(t, s.JSON("mail", "list"), "messages"); len(got) != 0 {
		t.Fatalf("mail list on a new ledger: %v", got)
	}
	if res := s.Textgen("mail", "list"); res.Code != 0 || strings.TrimSpace(res.Stdout) != "The outbox is empty." {
		t.Fatalf("mail list table on a new ledger: %v", res)
	}

	// Two invitations, as the operator sends them; each is tried at once and fails.
	acct := caddyproc.Str(t, s.JSON("account", "create", "--email", "stuck@example.com"), "id")
	var tokens []string
	for range 2 {
		inv := s.JSON("account", "invite", "--account", acct)
		u, err := url.Parse(caddyproc.Str(t, inv, "link"))
		if err != nil || u.Query().Get("token") == "" || !caddyproc.Bool(t, inv, "mailed") {
			t.Fatalf("invite: %v", inv)
		}
		tokens = append(tokens, u.Query().Get("token"))
	}
	var list map[string]any
	var msgs []map[string]any
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		list = s.JSON("mail", "list")
		msgs = caddyproc.List(t, list, "messages")
		if len(msgs) == 2 && msgs[0]["last_error"] != nil && msgs[1]["last_error"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failed attempt of both invitations in 30 s: %v", msgs)
		}
	}
	for i, m := range msgs {
		keys := slices.Sorted(maps.Keys(m))
		if want := []string{"account_id", "attempts", "created", "id", "kind", "last_error", "next_attempt", "sending"}; !slices.Equal(keys, want) {
			t.Errorf("message %d has the fields %v; want exactly %v", i, keys, want)
		}
		id, _ := m["id"].(string)
		lastErr, _ := m["last_error"].(string)
		created, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(m["created"]))
		next, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(m["next_attempt"]))
		if !strings.HasPrefix(id, "mail_") || m["kind"] != "invite" || m["account_id"] != acct || caddyproc.Num(t, m, "attempts") < 1 ||
			!strings.Contains(lastErr, fmt.Sprintf("127.0.0.1:%d", smtpDown)) || !strings.Contains(lastErr, "refused") ||
			err1 != nil || err2 != nil || !next.After(created) {
			t.Errorf("message %d: %v", i, m)
		}
		if _, ok := m["sending"].(bool); !ok {
			t.Errorf("message %d: sending is not a boolean: %v", i, m)
		}
	}
	first, second := msgs[0]["id"].(string), msgs[1]["id"].(string)
	if first >= second {
		t.Errorf("not oldest first: %s, %s", first, second)
	}
	if got := caddyproc.List(t, s.JSON("mail", "list", "--limit", "1"), "messages"); len(got) != 1 || got[0]["id"] != first {
		t.Errorf("mail list --limit 1: %v; want %s", got, first)
	}
	table := s.Textgen("mail", "list")
	if table.Code != 0 {
		t.Fatalf("mail list table: %v", table)
	}
	for _, want := range []string{"ID", "KIND", "ACCOUNT", "QUEUED", "ATTEMPTS", "NEXT ATTEMPT", "LAST ERROR", first, second, "invite", acct, "refused", "caddy textgen mail drop --id"} {
		if !strings.Contains(table.Stdout, want) {
			t.Errorf("mail list table does not show %q:\n%s", want, table.Stdout)
		}
	}
	// What the message says (its link, its address) is sealed in the ledger and shown nowhere.
	raw := s.Textgen("mail", "list", "--json")
	for _, out := range []string{raw.Stdout, table.Stdout} {
		for _, secret := range append([]string{"stuck@example.com", "token", "sealed", "claim"}, tokens...) {
			if strings.Contains(out, secret) {
				t.Errorf("mail list shows %q:\n%s", secret, out)
			}
		}
	}

	// The operator gives up on both: once each.
	if res := s.Textgen("mail", "drop", "--id", first); res.Code != 0 || !strings.Contains(res.Stdout, "E-mail "+first+" is dropped") {
		t.Fatalf("mail drop: %v", res)
	}
	if got := caddyproc.List(t, s.JSON("mail", "list"), "messages"); len(got) != 1 || got[0]["id"] != second {
		t.Fatalf("mail list after dropping %s: %v", first, got)
	}
	if got := s.JSON("mail", "drop", "--id", second); got["dropped"] != second {
		t.Fatalf("mail drop --json: %v", got)
	}
	if got := caddyproc.List(t, s.JSON("mail", "list"), "messages"); len(got) != 0 {
		t.Fatalf("mail list after dropping both: %v", got)
	}
	if res := s.Textgen("mail", "list"); res.Code != 0 || strings.TrimSpace(res.Stdout) != "The outbox is empty." {
		t.Fatalf("mail list table after dropping both: %v", res)
	}

	// Mistakes.
	caddyproc.MustFail(t, s.Textgen("mail", "drop", "--id", first, "--json"), 1, first, "not found")
	caddyproc.MustFail(t, s.Textgen("mail", "drop", "--id", first), 1, "error: ", first, "not found")
	caddyproc.MustFail(t, s.Textgen("mail", "drop", "--json"), 2, "--id is required")
	caddyproc.MustFail(t, s.Textgen("mail", "list", "--limit", "0", "--json"), 2, "--limit")
	caddyproc.MustFail(t, s.Textgen("mail", "list", "--limit", "1001"), 2, "--limit")
	caddyproc.MustFail(t, s.Textgen("mail", "purge"), 2, "unknown command")
}
