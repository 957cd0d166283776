package operator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/caddymodule/internal/progress"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// TestCLIMigrateToPostgres moves a Badger ledger with accounts, live and test keys, grants,
// adjustments and requests into an empty PostgreSQL database with `caddy textgen ledger
// migrate`, the way an operator moves up to several instances: the server stopped, the copy
// verified, a server on the database with the same balances, history and usage, whose old keys
// still work. Migrating while the server runs, or into a database that is not empty, is refused.
func TestCLIMigrateToPostgres(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ledger")
	s := startCLIServer(t, dir)
	var ids []string
	for i, grant := range []int{5, 40} {
		id := caddyproc.Str(t, s.JSON("account", "create", "--email", fmt.Sprintf("move%d@example.com", i)), "id")
		s.JSON("credits", "grant", "--account", id, "--credits", fmt.Sprint(grant), "--reference", fmt.Sprint("inv-", i))
		s.JSON("credits", "grant", "--account", id, "--credits", "3", "--test")
		s.JSON("credits", "adjust", "--account", id, "--credits", "-1", "--reason", "correction")
		ids = append(ids, id)
	}
	live := caddyproc.Str(t, s.JSON("key", "create", "--account", ids[1], "--name", "prod"), "key")
	sandbox := caddyproc.Str(t, s.JSON("key", "create", "--account", ids[1], "--test"), "key")
	if st := s.Generate(sandbox, "email-writer"); st != 200 {
		t.Fatalf("generate with a test key: %d", st)
	}
	balances := map[string]string{}
	for _, id := range ids {
		balances[id] = s.Textgen("balance", "--account", id, "--json").Stdout
	}
	history := s.Textgen("history", "--account", ids[1], "--json").Stdout
	usage := s.Textgen("usage", "--json").Stdout
	entries := caddyproc.Num(t, s.JSON("ledger", "verify"), "entries")

	url := pgtest.NewDatabase(t)
	// While the server runs, the directory is locked: the command says to stop it.
	caddyproc.MustFail(t, s.Textgen("ledger", "migrate", "--ledger", dir, "--to", url), 1, "stop the server")
	s.Stop()
	// The database's trust authentication ignores a password, so the URL can carry one: the
	// output shows the URL without it.
	if !strings.HasPrefix(url, "postgres://postgres@") {
		t.Fatalf("pgtest URL %q: no user to add a password to", url)
	}
	withPassword := strings.Replace(url, "postgres@", "postgres:s3cret@", 1)
	// Its progress goes to stderr, a line for every count here (the interval made 0), and its
	// --json object alone to stdout.
	t.Setenv(progress.IntervalEnv, "0s")
	mig := s.Textgen("ledger", "migrate", "--ledger", dir, "--to", withPassword, "--json")
	res := caddyproc.MustOneJSON(t, mig)
	wantProgress(t, mig, `copying: 0 of \d+ records \(0%\)`, `copying: \d+ records in \d+s`,
		`verifying the Badger ledger: 2 of 2 accounts \(100%\)`, `verifying the Badger ledger: 2 accounts in \d+s`,
		`verifying the PostgreSQL ledger: 2 accounts in \d+s`)
	if !caddyproc.Bool(t, res, "migrated") || !caddyproc.Bool(t, res, "from_ok") || !caddyproc.Bool(t, res, "to_ok") || caddyproc.Num(t, res, "accounts") != 2 {
		t.Fatalf("migrate: %v", res)
	}
	if caddyproc.Num(t, res, "entries") != entries || caddyproc.Str(t, res, "from") != dir {
		t.Errorf("migrate: %v, want %d entries from %s", res, entries, dir)
	}
	if to := caddyproc.Str(t, res, "to"); strings.Contains(to, "s3cret") || !strings.HasSuffix(to, "@"+strings.TrimPrefix(url, "postgres://postgres@")) {
		t.Errorf("migrate: to %q, want %s without its password", to, withPassword)
	}
	// A second copy into the same database is refused: it is not empty any more.
	caddyproc.MustFail(t, s.Textgen("ledger", "migrate", "--ledger", dir, "--to", url), 1, "empty")

	pg := caddyproc.Start(t, fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama http://127.0.0.1:1\n\t}", url), url)
	for _, id := range ids {
		if got := pg.Textgen("balance", "--account", id, "--json").Stdout; got != balances[id] {
			t.Errorf("balance of %s on PostgreSQL:\n%s\nwant\n%s", id, got, balances[id])
		}
	}
	if got := pg.Textgen("history", "--account", ids[1], "--json").Stdout; got != history {
		t.Errorf("history on PostgreSQL:\n%s\nwant\n%s", got, history)
	}
	if got := pg.Textgen("usage", "--json").Stdout; got != usage {
		t.Errorf("usage on PostgreSQL:\n%s\nwant\n%s", got, usage)
	}
	if st := pg.Generate(sandbox, "email-writer"); st != 200 {
		t.Errorf("the test key on PostgreSQL: %d", st)
	}
	// The live key authenticates (the model is unreachable here: 503, not 401).
	if st := pg.Generate(live, "email-writer"); st != 503 {
		t.Errorf("the live key on PostgreSQL: %d, want 503 (authenticated, no model server)", st)
	}
	if v := pg.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
		t.Fatalf("verify on PostgreSQL: %v", v)
	}
	// Backups of a PostgreSQL ledger are PostgreSQL's own; the command says so.
	caddyproc.MustFail(t, pg.Textgen("backup", "--output", filepath.Join(t.TempDir(), "b")), 1, "pg_dump")
}
