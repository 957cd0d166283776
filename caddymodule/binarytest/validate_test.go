package binarytest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// TestValidateWhileRunning: the usual routine, validate then reload, works on a running server.
// `caddy validate` provisions the config without starting it, so it must not open the ledger
// that the running server holds locked (it failed with "Cannot acquire directory lock");
// `caddy adapt` works too, and the reload keeps serving from the same ledger.
func TestValidateWhileRunning(t *testing.T) {
	dir := ledgerDir(t)
	site := fmt.Sprintf("route {\n\t\ttextgen_account {\n\t\t\tledger %s\n\t\t}\n\t\ttextgen {\n\t\t\tledger %s\n\t\t\tollama %s\n\t\t}\n\t}", dir, dir, deadURL(t))
	srv := caddyproc.Start(t, site, dir)
	acct := caddyproc.Str(t, srv.JSON("account", "create", "--email", "validate@example.com"), "id")

	for _, args := range [][]string{
		{"validate", "--config", srv.Config, "--adapter", "caddyfile"},
		{"adapt", "--config", srv.Config, "--adapter", "caddyfile", "--validate"},
	} {
		res := caddyproc.Run(t, srv.Home, args...)
		if res.Code != 0 {
			t.Fatalf("caddy %s while the server runs: %s", strings.Join(args, " "), res)
		}
	}
	res := caddyproc.Run(t, srv.Home, "reload", "--config", srv.Config, "--adapter", "caddyfile", "--address", srv.Admin, "--force")
	if res.Code != 0 {
		t.Fatalf("caddy reload: %s", res)
	}
	// The reloaded config serves the same, still open ledger.
	if got := caddyproc.Str(t, srv.JSON("account", "get", "--account", acct), "id"); got != acct {
		t.Fatalf("after the reload: account %q, want %q", got, acct)
	}
	if v := srv.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
		t.Fatalf("verify after the reload: %v", v)
	}
}
