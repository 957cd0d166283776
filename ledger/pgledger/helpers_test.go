package pgledger

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger/badgerledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestMain stops the PostgreSQL server that tests of this package may have started.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var bg = context.Background()

// now is the clock of the stores openPostgres opens without one of their own (setNow).
var now = time.Now

// setNow fixes the tests' clock to *at (read on every call) until the test ends. Set it only
// while no background loop of an open store can run.
func setNow(t testing.TB, at *time.Time) {
	t.Helper()
	old := now
	now = func() time.Time { return *at }
	t.Cleanup(func() { now = old })
}

// pgQuiet disables the background loops so tests drive sweeps and flushes themselves, on the
// tests' clock.
var pgQuiet = PostgresOptions{SweepInterval: -1, LastUsedFlushInterval: -1, Now: func() time.Time { return now() }}

// openPostgres opens a store with o on url, closed when the test ends; without o.Now it reads
// the tests' clock.
func openPostgres(t testing.TB, url string, o PostgresOptions) *Postgres {
	t.Helper()
	if o.Now == nil {
		o.Now = func() time.Time { return now() }
	}
	s, err := OpenPostgres(context.Background(), url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openBadger opens a Badger ledger in dir on the tests' clock, closed when the test ends: what
// CopyLedger copies from.
func openBadger(t testing.TB, dir string) *badgerledger.Badger {
	t.Helper()
	s, err := badgerledger.Open(dir, badgerledger.Options{SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1,
		Now: func() time.Time { return now() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
