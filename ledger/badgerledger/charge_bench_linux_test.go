//go:build linux

package badgerledger

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// BenchmarkChargeCPU is the CPU the durable charge of one generation costs the process: a
// Reserve and its Settle, as the generate handler makes them, from 64 callers on one account,
// on a ledger that syncs every commit (what production runs) and on one that does not (the
// disk sync's share of the charge), alternating in rounds so both see the same machine.
// .ci/bench-isolated runs it on the cores it gives caddy, to split the CPU that a textgen request
// spends beyond the reverse_proxy's into the charge's and the rest. The holds name a real key of
// the account without a budget, as nearly every request's does.
func BenchmarkChargeCPU(b *testing.B) {
	dir := b.TempDir()
	synced := openDir(b, filepath.Join(dir, "synced"), quiet)
	o := quiet
	o.DisableSyncWrites = true
	unsynced := openDir(b, filepath.Join(dir, "unsynced"), o)
	stores := []*Badger{synced, unsynced}
	accts, keys := make([]string, 2), make([]string, 2)
	for i, s := range stores {
		accts[i] = ledgertest.MustAccount(b, s, "charge@example.com").ID
		ledgertest.MustGrant(b, s, accts[i], ledger.Live, 1<<40)
		_, k, err := s.CreateKey(bg, accts[i], ledger.Live, "bench", time.Time{})
		if err != nil {
			b.Fatal(err)
		}
		keys[i] = k.ID
	}
	const round, callers = 2000, 64
	var cpu [2]time.Duration
	var n atomic.Int64
	rounds := 0
	for b.Loop() {
		rounds++
		for i, s := range stores {
			c0 := processCPUTime(b)
			var wg sync.WaitGroup
			var left atomic.Int64
			left.Store(round)
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						rid := fmt.Sprint("r", n.Add(1))
						if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: accts[i], Mode: ledger.Live, RequestID: rid, KeyID: keys[i], Tool: "summarize"}); err != nil {
							b.Error(err)
							return
						}
						if _, err := s.Settle(bg, accts[i], rid); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			cpu[i] += processCPUTime(b) - c0
		}
	}
	ops := float64(rounds * round)
	b.ReportMetric(float64(cpu[0].Microseconds())/ops, "charge-synced-cpu-us")
	b.ReportMetric(float64(cpu[1].Microseconds())/ops, "charge-unsynced-cpu-us")
	b.ReportMetric(float64((cpu[0]-cpu[1]).Microseconds())/ops, "sync-share-cpu-us")
}
