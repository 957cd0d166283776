package ledgertest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

var bg = context.Background()

// MustAccount creates an account, failing the test on an error.
func MustAccount(t testing.TB, s ledger.Store, email string) ledger.Account {
	t.Helper()
	a, err := s.CreateAccount(bg, email)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// MustGrant grants n credits of mode m to acct, failing the test on an error.
func MustGrant(t testing.TB, s ledger.Store, acct string, m ledger.Mode, n int64) ledger.GrantResult {
	t.Helper()
	r, err := s.Grant(bg, ledger.GrantRequest{AccountID: acct, Mode: m, Kind: ledger.KindGrant, Credits: n})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// MustHold holds a credit for the request rid, failing the test on an error.
func MustHold(t testing.TB, s ledger.Store, acct string, m ledger.Mode, rid string) ledger.HoldResult {
	t.Helper()
	r, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: m, RequestID: rid, KeyID: "key_test", Tool: "summarize"})
	if err != nil {
		t.Fatalf("hold %s: %v", rid, err)
	}
	return r
}

// MustBalance reads acct's balance, failing the test on an error.
func MustBalance(t testing.TB, s ledger.Store, acct string) ledger.Balance {
	t.Helper()
	b, err := s.Balance(bg, acct)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WantErr fails the test unless err is want (errors.Is).
func WantErr(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}

// VerifyClean fails the test unless Verify finds nothing wrong.
func VerifyClean(t testing.TB, s ledger.Store) ledger.VerifyReport {
	t.Helper()
	r, err := s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK || len(r.Problems) > 0 {
		t.Fatalf("verify: %+v", r.Problems)
	}
	return r
}

// AllHistory returns every entry of the account, newest first.
func AllHistory(t testing.TB, s ledger.Store, acct string) []ledger.Entry {
	t.Helper()
	var out []ledger.Entry
	cur := ""
	for {
		es, next, err := s.History(bg, acct, ledger.Page{Cursor: cur, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, es...)
		if next == "" {
			return out
		}
		cur = next
	}
}

// GoodPassword passes the password policy.
const GoodPassword = "correct horse battery"

// FanOut runs b.N calls of f over exactly callers goroutines and returns calls per second.
func FanOut(b *testing.B, callers int, f func(caller int, i int64)) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				f(c, i)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	return float64(b.N) / el.Seconds()
}
