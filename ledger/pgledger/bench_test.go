package pgledger

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// pgBenchStores opens n instances (stores, each with its own pool and committer) on one fresh
// database with accounts accounts of plenty of credits. The server is pgtest's: PostgreSQL's
// default durability (fsync, synchronous_commit on).
func pgBenchStores(b *testing.B, n, accounts int) ([]*Postgres, []string) {
	b.Helper()
	url := pgtest.NewDatabase(b)
	stores := make([]*Postgres, n)
	for i := range stores {
		stores[i] = openPostgres(b, url, pgQuiet)
	}
	ids := make([]string, accounts)
	for i := range ids {
		ids[i] = ledgertest.MustAccount(b, stores[0], fmt.Sprintf("bench%d@example.com", i)).ID
		ledgertest.MustGrant(b, stores[0], ids[i], ledger.Live, 1<<40)
	}
	return stores, ids
}

// BenchmarkPostgresHoldSettle: one op is a Hold plus its Settle, each committed, as
// BenchmarkHoldSettle does on Badger (run both in one go test -bench 'HoldSettle' to compare).
// "instances=2" splits the callers over two stores on one database, as two Caddy instances.
func BenchmarkPostgresHoldSettle(b *testing.B) {
	for _, c := range []struct {
		name                         string
		instances, accounts, callers int
	}{
		{"hot/callers=1", 1, 1, 1},
		{"hot/callers=8", 1, 1, 8},
		{"hot/callers=64", 1, 1, 64},
		{"spread64/callers=64", 1, 64, 64},
		{"instances=2/hot/callers=64", 2, 1, 64},
	} {
		b.Run(c.name, func(b *testing.B) {
			stores, ids := pgBenchStores(b, c.instances, c.accounts)
			rate := ledgertest.FanOut(b, c.callers, func(caller int, i int64) {
				s, acct, rid := stores[caller%len(stores)], ids[caller%len(ids)], fmt.Sprint("r", i)
				if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: rid, KeyID: "key_bench", Tool: "summarize"}); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Settle(bg, acct, rid); err != nil {
					b.Fatal(err)
				}
			})
			b.ReportMetric(rate, "holdsettle/s")
			var batches, calls int64
			for _, s := range stores {
				batches, calls = batches+s.c.batches.Load(), calls+s.c.calls.Load()
			}
			b.ReportMetric(float64(calls)/float64(batches), "calls/batch")
		})
	}
}

// BenchmarkPostgresHoldLatency: the latency of one Reserve and of one Settle at one caller, the
// time a generate request waits on the ledger before its first byte (with LookupKeyBalance).
// At one caller each is a batch of one: one round trip and one commit.
func BenchmarkPostgresHoldLatency(b *testing.B) {
	stores, ids := pgBenchStores(b, 1, 1)
	s, acct := stores[0], ids[0]
	hold, settle := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		rid := fmt.Sprint("r", i)
		t0 := time.Now()
		if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: rid, KeyID: "key_bench", Tool: "summarize"}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := s.Settle(bg, acct, rid); err != nil {
			b.Fatal(err)
		}
		hold, settle = append(hold, t1.Sub(t0)), append(settle, time.Since(t1))
	}
	b.StopTimer()
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"hold", hold}, {"settle", settle}} {
		slices.Sort(m.ds)
		b.ReportMetric(float64(m.ds[len(m.ds)/2].Microseconds()), m.name+"-p50-µs")
		b.ReportMetric(float64(m.ds[len(m.ds)*99/100].Microseconds()), m.name+"-p99-µs")
	}
}
