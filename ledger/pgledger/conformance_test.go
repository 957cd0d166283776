package pgledger

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestConformance runs the conformance suite on PostgreSQL: each store gets a fresh database
// on the test binary's server.
func TestConformance(t *testing.T) {
	ledgertest.Run(t, ledgertest.Engine{
		Open: func(t *testing.T, o ledgertest.Options) ledger.Store {
			po := pgQuiet
			po.HoldTTL, po.Now = o.HoldTTL, o.Now
			return openPostgres(t, pgtest.NewDatabase(t), po)
		},
		Expire: func(t *testing.T, s ledger.Store) (int, error) { return s.(*Postgres).sweep(bg) },
		Stored: func(t *testing.T, s ledger.Store) [][]byte {
			t.Helper()
			return pgStored(t, s.(*Postgres))
		},
	})
}

// pgStored returns every row of every table of the ledger's database, as text.
func pgStored(t testing.TB, s *Postgres) [][]byte {
	t.Helper()
	rows, _ := s.pool.Query(bg, `SELECT tablename FROM pg_tables WHERE schemaname = 'public'`)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, tab := range tables {
		rows, _ := s.pool.Query(bg, `SELECT t::text FROM `+pgx.Identifier{tab}.Sanitize()+` t`)
		texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range texts {
			out = append(out, []byte(x))
		}
	}
	return out
}
