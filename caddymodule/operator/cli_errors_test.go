package operator

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// oneErrorLine requires exit code, nothing on stdout, and exactly one plain line on stderr:
// "error: " and a message that contains every one of want.
func oneErrorLine(t *testing.T, res caddyproc.Result, code int, want ...string) {
	t.Helper()
	caddyproc.MustFail(t, res, code, want...)
	if !strings.HasPrefix(res.Stderr, "error: ") || !strings.HasSuffix(res.Stderr, "\n") || strings.Count(res.Stderr, "\n") != 1 {
		t.Errorf("want one plain line \"error: ...\" on stderr\n%s", res)
	}
}

// TestCLIUsageErrorsExit2: every command-line mistake exits 2 with one plain line, before any
// request (no server listens at the address), with and without --json.
func TestCLIUsageErrorsExit2(t *testing.T) {
	home := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", caddyproc.FreePort(t))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"credits", "grant", "--account", "acct_x", "--credits", "ten"}, `invalid argument "ten" for "--credits"`},
		{[]string{"history", "--account", "acct_x", "--limit", "many"}, `"--limit"`},
		{[]string{"account", "list", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"balance", "--account", "acct_x", "-z"}, "unknown shorthand flag: 'z'"},
		{[]string{"balance", "--account", "acct_x", "extra"}, `unknown command "extra" for "caddy textgen balance"`},
		{[]string{"acount"}, `unknown command "acount" for "caddy textgen"`},
		{[]string{"account", "lst"}, `unknown command "lst" for "caddy textgen account"`},
		{[]string{"credits", "grant", "--account", "acct_x"}, "--credits is required"},
		{[]string{"balance"}, "--account is required"},
		{[]string{"backup"}, "--output is required"},
	} {
		args := append(append([]string{"textgen"}, c.args...), "--address", addr)
		oneErrorLine(t, caddyproc.Run(t, home, args...), 2, c.want)
		// with --json the code is the same; the message is there too (a parse error as the same
		// plain line, a command's own check as Caddy's log line, as before)
		caddyproc.MustFail(t, caddyproc.Run(t, home, append(args, "--json")...), 2, c.want)
	}
}

// TestCLITableErrors: without --json a failure is one plain line on stderr, not a log line.
func TestCLITableErrors(t *testing.T) {
	s := startCLIServer(t, filepath.Join(t.TempDir(), "ledger"))
	oneErrorLine(t, s.Textgen("balance", "--account", "acct_nope"), 1, "account acct_nope not found")
	oneErrorLine(t, s.Textgen("account", "create", "--email", "not an email"), 1, "not a valid address")
	addr := fmt.Sprintf("127.0.0.1:%d", caddyproc.FreePort(t))
	oneErrorLine(t, caddyproc.Run(t, s.Home, "textgen", "ledger", "verify", "--address", addr), 1, "cannot reach Caddy's admin API at "+addr)
	// --json keeps Caddy's log line (JSON when stderr is not a terminal)
	res := s.Textgen("balance", "--account", "acct_nope", "--json")
	caddyproc.MustFail(t, res, 1, "account acct_nope not found")
	if !strings.HasPrefix(res.Stderr, "{") {
		t.Errorf("with --json, want the error as Caddy's log line\n%s", res)
	}
}
