package badgerledger

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// benchStore opens a synced store on a real directory with n accounts of plenty of credits.
func benchStore(b *testing.B, n int) (*Badger, []string) {
	b.Helper()
	s, err := Open(b.TempDir(), Options{SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ids := make([]string, n)
	for i := range ids {
		ids[i] = ledgertest.MustAccount(b, s, fmt.Sprintf("bench%d@example.com", i)).ID
		ledgertest.MustGrant(b, s, ids[i], ledger.Live, 1<<40)
	}
	return s, ids
}

func holdSettle(b *testing.B, s *Badger, acct, rid string) {
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: rid, KeyID: "key_bench", Tool: "summarize"}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Settle(bg, acct, rid); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkHoldSettle: one op is a Hold plus its Settle, each synced to disk.
func BenchmarkHoldSettle(b *testing.B) {
	for _, c := range []struct {
		name              string
		accounts, callers int
	}{
		{"hot/callers=1", 1, 1},
		{"hot/callers=8", 1, 8},
		{"hot/callers=64", 1, 64},
		{"spread64/callers=64", 64, 64},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, ids := benchStore(b, c.accounts)
			rate := ledgertest.FanOut(b, c.callers, func(caller int, i int64) {
				holdSettle(b, s, ids[caller%len(ids)], fmt.Sprint("r", i))
			})
			b.ReportMetric(rate, "holdsettle/s")
		})
	}
}

// BenchmarkHoldSettleKey: one op is a Hold plus its Settle by one caller on a ledger that does
// not sync (the CPU and allocations of the charge, not the disk's), naming a real key of the
// account without a budget (what nearly every request does) or with one (counted and written in
// every hold).
func BenchmarkHoldSettleKey(b *testing.B) {
	for _, c := range []struct {
		name   string
		limits ledger.KeyLimits
	}{{"nobudget", ledger.KeyLimits{}}, {"budget", ledger.KeyLimits{BudgetTotal: 1 << 40}}} {
		b.Run(c.name, func(b *testing.B) {
			o := quiet
			o.DisableSyncWrites = true
			s := openDir(b, b.TempDir(), o)
			a := ledgertest.MustAccount(b, s, "key@example.com").ID
			ledgertest.MustGrant(b, s, a, ledger.Live, 1<<40)
			_, k, err := s.CreateKey(bg, a, ledger.Live, "bench", time.Time{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.UpdateKey(bg, a, k.ID, ledger.KeySettings{Name: "bench", Limits: c.limits}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				rid := fmt.Sprint("r", i)
				if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: rid, KeyID: k.ID, Tool: "summarize"}); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Settle(bg, a, rid); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHoldLatency: 8 callers doing hold+settle on one hot account; the latency of each
// hold is recorded. "hold" is Hold, which returns once the hold is durable: its floor is one disk
// sync (see BenchmarkDiskSync, run next to it). "reserve" is Reserve, what the generate handler
// calls: the credit is reserved in memory and the write queued, and the Settle after it is
// durable only together with it.
func BenchmarkHoldLatency(b *testing.B) {
	for _, c := range []struct {
		name string
		wait bool
	}{{"hold", true}, {"reserve", false}} {
		b.Run(c.name, func(b *testing.B) {
			s, ids := benchStore(b, 1)
			const callers = 8
			lat := make([][]time.Duration, callers)
			rate := ledgertest.FanOut(b, callers, func(caller int, i int64) {
				rid := fmt.Sprint("r", i)
				t := time.Now()
				if _, err := s.hold(ledger.HoldRequest{AccountID: ids[0], Mode: ledger.Live, RequestID: rid}, c.wait); err != nil {
					b.Fatal(err)
				}
				lat[caller] = append(lat[caller], time.Since(t))
				if _, err := s.Settle(bg, ids[0], rid); err != nil {
					b.Fatal(err)
				}
			})
			reportLatency(b, slices.Concat(lat...))
			b.ReportMetric(rate, "holdsettle/s")
		})
	}
}

// BenchmarkDiskSync: the floor under every durable ledger operation on this disk, a 4 KiB write
// plus fsync in the benchmark's temporary directory, one at a time.
func BenchmarkDiskSync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "sync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	var lat []time.Duration
	i := int64(0)
	for b.Loop() {
		t := time.Now()
		if _, err := f.WriteAt(buf, (i%1024)*4096); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
		i++
	}
	reportLatency(b, lat)
}

func reportLatency(b *testing.B, all []time.Duration) {
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	q := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds())
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(all[len(all)-1].Microseconds()), "max-µs")
}

// BenchmarkLookupKey: a cached lookup of a valid key (format check, SHA-256, map).
func BenchmarkLookupKey(b *testing.B) {
	s, ids := benchStore(b, 1)
	full, _, err := s.CreateKey(bg, ids[0], ledger.Live, "bench", time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := s.LookupKey(bg, full); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := s.LookupKey(bg, full); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("malformed", func(b *testing.B) {
		bad := full[:43] + "!"
		for b.Loop() {
			if _, _, err := s.LookupKey(bg, bad); err != ledger.ErrInvalidKey {
				b.Fatal(err)
			}
		}
	})
}
