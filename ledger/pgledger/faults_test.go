package pgledger

import (
	"errors"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// Faults of the database itself, on the real server: stopped, or frozen (up but answering
// nothing). The store must answer ErrUnavailable within its deadlines, never hang, and work
// again by itself once the database is back, without being reopened.

// faultOptions are short deadlines, so that the tests measure them.
var faultOptions = PostgresOptions{SweepInterval: -1, LastUsedFlushInterval: -1, QueryTimeout: time.Second, HealthTimeout: 500 * time.Millisecond}

// faultStore opens a store with an account of 10 credits, one open hold, "before", and a key.
func faultStore(t *testing.T) (s *Postgres, acct, key string) {
	s = openPostgres(t, pgtest.NewDatabase(t), faultOptions)
	acct = ledgertest.MustAccount(t, s, "fault@example.com").ID
	ledgertest.MustGrant(t, s, acct, ledger.Live, 10)
	ledgertest.MustHold(t, s, acct, ledger.Live, "before")
	key, _, err := s.CreateKey(bg, acct, ledger.Live, "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return s, acct, key
}

// checkUnavailable checks that health, a key lookup, a new hold, a settle and a read all fail
// with ErrUnavailable within their deadlines (plus slack for a loaded machine): a client whose
// key cannot be checked is told to retry, not that its key is invalid.
func checkUnavailable(t *testing.T, s *Postgres, acct, key string) {
	t.Helper()
	slack := time.Second
	unavailableWithin(t, "Health", faultOptions.HealthTimeout+slack, func() error { return s.Health(bg) })
	unavailableWithin(t, "LookupKeyBalance", faultOptions.QueryTimeout+slack, func() error {
		_, _, _, err := s.LookupKeyBalance(bg, key)
		return err
	})
	unavailableWithin(t, "Hold", faultOptions.QueryTimeout+slack, func() error {
		_, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: "during"})
		return err
	})
	unavailableWithin(t, "Settle", faultOptions.QueryTimeout+slack, func() error {
		_, err := s.Settle(bg, acct, "before")
		return err
	})
	unavailableWithin(t, "Balance", faultOptions.QueryTimeout+slack, func() error {
		_, err := s.Balance(bg, acct)
		return err
	})
}

// checkRecovered checks that the same store works again: health, the settle that failed, a new
// hold, and a clean ledger.
func checkRecovered(t *testing.T, s *Postgres, acct string) {
	t.Helper()
	if err := s.Health(bg); err != nil {
		t.Fatalf("health after the database came back: %v", err)
	}
	// The first call after a thaw may still meet a connection the freeze left behind, or a
	// server slow to wake on a busy machine, and answer ErrUnavailable within the 1 s query
	// timeout: recovery is that the store works again, so the settle (idempotent) is retried
	// while the ledger says it is unavailable.
	var r ledger.HoldResult
	var err error
	for range 30 {
		if r, err = s.Settle(bg, acct, "before"); !errors.Is(err, ledger.ErrUnavailable) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || r.State != ledger.HoldSettled {
		t.Fatalf("settle after the database came back: %+v %v", r, err)
	}
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: "after"}); err != nil {
		t.Fatalf("hold after the database came back: %v", err)
	}
	// A hold that failed with ErrUnavailable may or may not have been committed; either way the
	// ledger adds up.
	ledgertest.VerifyClean(t, s)
}

// TestPostgresDatabaseDown: the database stopped (connections closed, new ones refused) or
// frozen (up, answering nothing), then back.
func TestPostgresDatabaseDown(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, c := range []struct {
		name     string
		down, up func() error
	}{{"stopped", srv.Stop, srv.Start}, {"frozen", srv.Freeze, srv.Thaw}} {
		t.Run(c.name, func(t *testing.T) {
			s, acct, key := faultStore(t)
			if err := c.down(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.up() })
			checkUnavailable(t, s, acct, key)
			if err := c.up(); err != nil {
				t.Fatal(err)
			}
			checkRecovered(t, s, acct)
		})
	}
}

// TestPostgresOpenUnavailable: opening a store on a database that is down fails at once with
// ErrUnavailable.
func TestPostgresOpenUnavailable(t *testing.T) {
	url := pgtest.NewDatabase(t)
	srv := pgtest.Shared(t)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Start() })
	start := time.Now()
	_, err := OpenPostgres(bg, url, faultOptions)
	if !errors.Is(err, ledger.ErrUnavailable) || time.Since(start) > 2*time.Second {
		t.Fatalf("open on a stopped database: %v after %v", err, time.Since(start))
	}
}
