package operator

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// TestCLIGrantExpires: `credits grant --expires` of the built binary against a running server
// gives credits that expire, and `balance` says what expires when; the refusals of the flag.
func TestCLIGrantExpires(t *testing.T) {
	s := startCLIServer(t, filepath.Join(t.TempDir(), "ledger"))
	id := caddyproc.Str(t, s.JSON("account", "create", "--email", "expiry@example.com", "--test-credits", "0"), "id")
	g := s.JSON("credits", "grant", "--account", id, "--credits", "10", "--expires", "90d")
	if caddyproc.Num(t, g, "available") != 10 || caddyproc.Num(t, g, "credited") != 10 {
		t.Fatalf("credits grant --expires 90d: %v", g)
	}
	at := time.Now().Add(400 * 24 * time.Hour).UTC().Truncate(time.Second)
	out := s.Textgen("credits", "grant", "--account", id, "--credits", "4", "--expires", at.Format(time.RFC3339))
	if out.Code != 0 || !strings.Contains(out.Stdout, "expires "+at.Format(time.RFC3339)) {
		t.Errorf("credits grant --expires RFC 3339 table\n%s", out)
	}
	s.JSON("credits", "grant", "--account", id, "--credits", "1")

	b := s.JSON("balance", "--account", id)
	exp, ok := b["expiring"].([]any)
	if caddyproc.Num(t, b, "balance") != 15 || !ok || len(exp) != 2 {
		t.Fatalf("balance with expiring credits: %v", b)
	}
	first, _ := exp[0].(map[string]any)
	if caddyproc.Num(t, first, "credits") != 10 {
		t.Errorf("soonest expiring credits: %v", first)
	}
	table := s.Textgen("balance", "--account", id)
	if table.Code != 0 || !strings.Contains(table.Stdout, "10 live credits expire") ||
		!strings.Contains(table.Stdout, "4 live credits expire "+at.Format(time.RFC3339)) {
		t.Errorf("balance table\n%s", table)
	}

	caddyproc.MustFail(t, s.Textgen("credits", "grant", "--account", id, "--credits", "1", "--expires", "soon"), 2, "--expires")
	caddyproc.MustFail(t, s.Textgen("credits", "grant", "--account", id, "--credits", "1", "--expires", "2001-01-01T00:00:00Z"), 2, "not in the future")
	caddyproc.MustFail(t, s.Textgen("credits", "grant", "--account", id, "--credits", "1", "--test", "--expires", "1d"), 2, "do not expire")
}
