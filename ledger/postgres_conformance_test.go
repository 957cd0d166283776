package ledger

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestMain stops the PostgreSQL server that tests of this package may have started.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// pgQuiet disables the background loops so tests drive sweeps and flushes themselves.
var pgQuiet = PostgresOptions{SweepInterval: -1, LastUsedFlushInterval: -1}

// openPostgres opens a store with o on url, closed when the test ends.
func openPostgres(t testing.TB, url string, o PostgresOptions) *Postgres {
	t.Helper()
	s, err := OpenPostgres(context.Background(), url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// postgresEngine describes the PostgreSQL engine to the conformance suite: each store gets a
// fresh database on the test binary's server.
func postgresEngine() engine {
	return engine{
		open: func(t *testing.T, holdTTL time.Duration) Store {
			o := pgQuiet
			o.HoldTTL = holdTTL
			return openPostgres(t, pgtest.NewDatabase(t), o)
		},
		expire: func(t *testing.T, s Store) (int, error) { return s.(*Postgres).sweep(bg) },
		stored: func(t *testing.T, s Store) [][]byte {
			t.Helper()
			return pgStored(t, s.(*Postgres))
		},
	}
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
