package operator

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// TestCLIMembers runs 'caddy textgen member ...' of the built binary against a running server:
// organise, add, role, cap, list (JSON and table), usage, remove, and the refusals with their
// exit codes and messages.
func TestCLIMembers(t *testing.T) {
	s := startCLIServer(t, filepath.Join(t.TempDir(), "ledger"))
	org := caddyproc.Str(t, s.JSON("account", "create", "--email", "org@example.com"), "id")
	bob := caddyproc.Str(t, s.JSON("account", "create", "--email", "bob@example.com"), "id")

	if out := s.Textgen("member", "list", "--account", org); out.Code != 0 || !strings.Contains(out.Stdout, "personal account") {
		t.Fatalf("member list of a personal account: %s", out)
	}
	caddyproc.MustFail(t, s.Textgen("member", "add", "--account", org, "--member", bob, "--json"), 1, "not an organisation")
	if got := s.JSON("member", "organise", "--account", org); got["organisation"] != true {
		t.Fatalf("member organise: %v", got)
	}
	if got := s.JSON("member", "add", "--account", org, "--member", bob); caddyproc.Str(t, got, "role") != "member" {
		t.Fatalf("member add: %v", got)
	}
	caddyproc.MustFail(t, s.Textgen("member", "add", "--account", org, "--member", bob, "--json"), 1, "already a member")
	caddyproc.MustFail(t, s.Textgen("member", "add", "--account", org, "--json"), 2, "--member is required")
	if got := s.JSON("member", "role", "--account", org, "--member", bob, "--role", "admin"); caddyproc.Str(t, got, "role") != "admin" {
		t.Fatalf("member role: %v", got)
	}
	caddyproc.MustFail(t, s.Textgen("member", "role", "--account", org, "--member", org, "--role", "member", "--json"), 1, "last owner")
	caddyproc.MustFail(t, s.Textgen("member", "cap", "--account", org, "--member", bob, "--json"), 2, "--monthly-cap is required")
	if got := s.JSON("member", "cap", "--account", org, "--member", bob, "--monthly-cap", "5"); caddyproc.Num(t, got, "monthly_cap") != 5 {
		t.Fatalf("member cap: %v", got)
	}
	if ms := caddyproc.List(t, s.JSON("member", "list", "--account", org), "members"); len(ms) != 2 {
		t.Fatalf("member list: %v", ms)
	}
	table := s.Textgen("member", "list", "--account", org)
	if table.Code != 0 || !strings.Contains(table.Stdout, "bob@example.com") || !strings.Contains(table.Stdout, "MONTHLY CAP") {
		t.Fatalf("member list table: %s", table)
	}
	if u := s.JSON("member", "usage", "--account", org); len(caddyproc.List(t, u, "usage")) != 0 {
		t.Fatalf("member usage: %v", u)
	}
	caddyproc.MustFail(t, s.Textgen("member", "usage", "--account", org, "--from", "2030-1", "--json"), 1, "YYYY-MM")
	caddyproc.MustFail(t, s.Textgen("member", "remove", "--account", org, "--member", org, "--json"), 1, "own login cannot leave")
	if got := s.JSON("member", "remove", "--account", org, "--member", bob); len(caddyproc.List(t, got, "revoked_keys")) != 0 {
		t.Fatalf("member remove: %v", got)
	}
	caddyproc.MustFail(t, s.Textgen("member", "remove", "--account", org, "--member", bob, "--json"), 1, "not a member")
}
