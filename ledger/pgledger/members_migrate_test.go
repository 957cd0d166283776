package pgledger

import (
	"io/fs"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestPostgresOrganisationsMigration: a ledger from before organisations keeps working through
// 00010 with nothing set, and 00010 goes down again cleanly. An account with a key and a hold
// is written, the schema is taken down below 00010 (the hold functions as they were: a hold
// and its settle work), then up again: the key is found with no member, the hold settles, a
// new hold is taken and the ledger verifies; then the account becomes an organisation.
func TestPostgresOrganisationsMigration(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s := openPostgres(t, url, pgQuiet)
	acct := ledgertest.MustAccount(t, s, "before@example.com").ID
	ledgertest.MustGrant(t, s, acct, ledger.Live, 5)
	full, k, err := s.CreateKey(bg, acct, ledger.Live, "old", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: "open", KeyID: k.ID}); err != nil {
		t.Fatal(err)
	}
	fsys, err := fs.Sub(pgMigrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(pgVersionTable), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(bg, 9); err != nil {
		t.Fatalf("00010 down: %v", err)
	}
	var outcome string
	if err := s.pool.QueryRow(bg, `SELECT o_outcome FROM ledger_hold($1, $2, 'hold', 'below', 'live', $3, '', $4, '')`,
		acct, time.Now().UnixNano(), k.ID, time.Now().Add(time.Hour).UnixNano()).Scan(&outcome); err != nil || outcome != "ok" {
		t.Fatalf("a hold below 00010: %q %v", outcome, err)
	}
	if err := s.pool.QueryRow(bg, `SELECT o_outcome FROM ledger_hold($1, $2, 'settle', 'below', '', '', '', 0, '')`,
		acct, time.Now().UnixNano()).Scan(&outcome); err != nil || outcome != "ok" {
		t.Fatalf("a settle below 00010: %q %v", outcome, err)
	}
	if _, err := p.Up(bg); err != nil {
		t.Fatalf("00010 up again: %v", err)
	}
	s.Close()

	s = openPostgres(t, url, pgQuiet)
	gk, _, err := s.LookupKey(bg, full)
	if err != nil || gk.MemberID != "" || ledger.KeyMember(gk) != acct {
		t.Fatalf("the old key after 00010: %+v %v", gk, err)
	}
	if _, err := s.Settle(bg, acct, "open"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: "after", KeyID: k.ID}); err != nil {
		t.Fatal(err)
	}
	if b := ledgertest.MustBalance(t, s, acct); b.Balance != 3 || b.Available != 2 {
		t.Fatalf("balance: %+v", b)
	}
	if ms := ledgertest.MustMembers(t, s, acct); len(ms) != 0 {
		t.Fatalf("members of an account from before: %+v", ms)
	}
	if _, err := s.MakeOrganisation(bg, acct); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Void(bg, acct, "after", "client_gone"); err != nil {
		t.Fatal(err)
	}
	ledgertest.VerifyClean(t, s)
}
