package binarytest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/pgledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestTwoInstancesRemovedMember: an organisation on one PostgreSQL ledger behind two Caddy
// instances. Its member's key works on both; the operator removes the member through instance
// a ('caddy textgen member remove'), and the very next request with that key to instance b is
// 401 invalid_api_key, charging nothing.
func TestTwoInstancesRemovedMember(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	a := caddyproc.Start(t, pgSite(url, fs.URL, ""), url)
	b := caddyproc.Start(t, pgSite(url, fs.URL, ""), url)
	org := caddyproc.Str(t, a.JSON("account", "create", "--email", "org@example.com"), "id")
	member := caddyproc.Str(t, b.JSON("account", "create", "--email", "member@example.com"), "id")
	a.JSON("member", "organise", "--account", org)
	if m := b.JSON("member", "add", "--account", org, "--member", member); caddyproc.Str(t, m, "role") != "member" {
		t.Fatalf("member add: %v", m)
	}
	a.JSON("credits", "grant", "--account", org, "--credits", "10", "--reference", "members")
	// The member's key, made as My Account makes it (the CLI makes an organisation's own keys).
	ctx := context.Background()
	store, err := pgledger.OpenPostgres(ctx, url, pgledger.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	key, _, err := store.CreateMemberKey(ctx, org, member, ledger.Live, "member's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{}
	body := genBody("summarizer", "x", "en", "")
	for _, s := range []*caddyproc.Server{a, b} {
		if status, text, _, err := postTo(client, s.HTTP, key, body); err != nil || status != 200 || text != "tok tok tok " {
			t.Fatalf("the member's key on %s: %d %q %v", s.HTTP, status, text, err)
		}
	}
	removed := a.JSON("member", "remove", "--account", org, "--member", member)
	if n := len(caddyproc.List(t, removed, "revoked_keys")); n != 1 {
		t.Fatalf("member remove revoked %d keys: %v", n, removed)
	}
	status, text, h, err := postTo(client, b.HTTP, key, body)
	if err != nil || status != http.StatusUnauthorized || !strings.Contains(text, `"invalid_api_key"`) || h.Get("X-Credits-Used") != "0" {
		t.Fatalf("the removed member's key on the other instance: %d %q %v", status, text, err)
	}
	if bal := caddyproc.Num(t, b.JSON("balance", "--account", org), "available"); bal != 8 {
		t.Fatalf("the organisation's credits: %d, want 8", bal)
	}
}
