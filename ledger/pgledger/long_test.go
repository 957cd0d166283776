package pgledger

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestPostgresLongStatements: the calls that read or write the whole ledger (CopyLedger,
// Verify) run for as long as their caller's deadline allows, so that `ledger migrate` (12 hours)
// can copy a ledger that takes longer than the 10 minutes a caller without a deadline gets.
func TestPostgresLongStatements(t *testing.T) {
	s := openPostgres(t, pgtest.NewDatabase(t), pgQuiet)
	// pgLongTimeout less the moments that passed before the statement.
	if got := statementTimeout(t, s.pool, bg); got <= pgLongTimeout-time.Minute || got > pgLongTimeout {
		t.Fatalf("without a deadline: statement_timeout %s, want %s", got, pgLongTimeout)
	}
	ctx, cancel := context.WithTimeout(bg, 12*time.Hour)
	defer cancel()
	// The deadline less the moments that passed before the statement: well above 11 hours.
	if got := statementTimeout(t, s.pool, ctx); got < 11*time.Hour || got > 12*time.Hour {
		t.Fatalf("with 12 hours left: statement_timeout %s", got)
	}
	ctx2, cancel2 := pgLongContext(ctx)
	defer cancel2()
	if dl, _ := ctx2.Deadline(); time.Until(dl) < 11*time.Hour {
		t.Fatalf("pgLongContext cut a 12-hour deadline to %s", time.Until(dl))
	}
}

// statementTimeout is the statement_timeout that pgLongStatements sets in a transaction under
// ctx (pgLongContext's).
func statementTimeout(t *testing.T, pool *pgxpool.Pool, ctx context.Context) time.Duration {
	t.Helper()
	ctx, cancel := pgLongContext(ctx)
	defer cancel()
	var ms int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := pgLongStatements(ctx, tx); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'`).Scan(&ms)
	})
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms) * time.Millisecond
}
