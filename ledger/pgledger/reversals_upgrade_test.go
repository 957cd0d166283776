package pgledger

import (
	"io/fs"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// A payment disputed under an earlier version was stored without its disputed cents (only the
// credits the dispute froze). After the upgrade, its next events still count the dispute: a
// purchase of 10 credits for 2.00 EUR, a dispute of 1.00 EUR open (5 credits frozen), then,
// after the upgrade, a refund of the other 1.00 EUR and the dispute lost: all the money came
// back, so all 10 credits are taken (without the dispute's cents the refund would take nothing
// more and leave 5).

// upgradedDisputeThenRefund runs the events after the upgrade and checks the outcome.
func upgradedDisputeThenRefund(t *testing.T, s ledger.Store, acct string) {
	t.Helper()
	ledgertest.MustReverse(t, s, ledgertest.Refund("re_up", "pi_up", 100))
	ledgertest.MustReverse(t, s, ledgertest.Dispute("du_up", "pi_up", 100, ledger.DisputeLost))
	ledgertest.WantFigures(t, s, acct, 0, 0)
	if p, err := s.GetPayment(bg, "pi_up"); err != nil || p.DisputedCents != 100 || p.RefundedCredits+p.DisputedCredits != 10 {
		t.Fatalf("payment after the upgrade: %+v %v", p, err)
	}
	ledgertest.VerifyClean(t, s)
}

// TestPostgresDisputedCentsMigration: migration 00013 counts the cents from the payments'
// disputes, and goes down again cleanly.
func TestPostgresDisputedCentsMigration(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s := openPostgres(t, url, pgQuiet)
	acct := ledgertest.MustAccount(t, s, "upgrade@example.com").ID
	ledgertest.BuyPaid(t, s, acct, "cs_up", "pi_up", 10, 200)
	ledgertest.MustReverse(t, s, ledgertest.Dispute("du_up", "pi_up", 100, ledger.DisputeOpen))
	ledgertest.WantFigures(t, s, acct, 5, 5)
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
	if _, err := p.DownTo(bg, 12); err != nil {
		t.Fatalf("00013 down: %v", err)
	}
	if _, err := p.Up(bg); err != nil {
		t.Fatalf("00013 up again: %v", err)
	}
	s.Close()
	s = openPostgres(t, url, pgQuiet)
	upgradedDisputeThenRefund(t, s, acct)
}
