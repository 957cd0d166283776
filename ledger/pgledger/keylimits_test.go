package pgledger

import (
	"context"
	"crypto/sha256"
	"io/fs"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestPostgresKeyLimitsMigration: a key made before keys had limits (the schema at 00008, the
// key as the earlier release wrote it) works after migration 00009 with no limits, no usage
// and no previous secret, and from then on is counted, limited and rolled like any other.
func TestPostgresKeyLimitsMigration(t *testing.T) {
	t0 := time.Date(2030, 9, 1, 8, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	fsys, err := fs.Sub(pgMigrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(pgVersionTable), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(bg, 8); err != nil {
		t.Fatal(err)
	}
	full := ledger.NewFullKey(ledger.Live)
	d := sha256.Sum256([]byte(full))
	old := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
			t.Fatal(err)
		}
	}
	old(`INSERT INTO accounts (id, email, status, created) VALUES ('acct_000000000000000old', 'old@example.com', 'active', 1)`)
	old(`INSERT INTO api_keys (id, account_id, digest, mode, name, prefix, last4, created)
		VALUES ('key_000000000old', 'acct_000000000000000old', $1, 'live', 'old', 'tg_live_', $2, 1)`, d[:], full[len(full)-4:])
	db.Close()
	pool.Close()

	s := openPostgres(t, url, pgQuiet)
	k, a, err := s.LookupKey(bg, full)
	if err != nil || a.ID != "acct_000000000000000old" {
		t.Fatalf("an old key after the migration: %+v %v", k, err)
	}
	if k.HasBudget() || k.AllowedTools != nil || k.AllowedCIDRs != nil || k.Usage != (ledger.KeyUsage{}) || !k.Rolled.IsZero() || k.PreviousLast4 != "" {
		t.Fatalf("an old key has limits after the migration: %+v", k)
	}
	ledgertest.MustGrant(t, s, a.ID, ledger.Live, 5)
	if err := ledgertest.HoldOn(s, a.ID, k.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateKey(bg, a.ID, k.ID, ledger.KeySettings{Name: "old", Limits: ledger.KeyLimits{BudgetTotal: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := ledgertest.HoldOn(s, a.ID, k.ID, "r2"); err != nil {
		t.Fatal(err)
	}
	ledgertest.WantBudget(t, ledgertest.HoldOn(s, a.ID, k.ID, "r3"), "total", 2, time.Time{})
	nw, _, err := s.RollKey(bg, a.ID, k.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{full, nw} {
		if _, _, err := s.LookupKey(bg, f); err != nil {
			t.Fatal(err)
		}
	}
	ledgertest.VerifyClean(t, s)
}
