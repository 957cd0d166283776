//go:build linux

package badgerledger

import (
	"crypto/rand"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// BenchmarkKeptCPU is the CPU the process spends to keep one generation's text in the kept
// store for its whole life: the put the retention's flusher makes when a charged generation ends
// (its record and one sealed chunk of a short answer), in batches of 16 as generations end
// together under load, the sweep that deletes it once its window has passed, and the store's
// memtable flushes and compactions that follow both. It compares the store as it is (records and
// text in the value log) with one that keeps them in its tables, one after the other in the same
// run, each from its open to its close, so that its compactions count whole and never in the
// other's figure; b.N is thousands of generations (-benchtime 500x: 500,000 each). The sweep's
// share is reported on its own. The receipt digest is left out: it rides in the ledger's next
// commit.
func BenchmarkKeptCPU(b *testing.B) {
	chunk := make([]byte, 12+16+200) // nonce, tag and a short answer's text
	rand.Read(chunk)
	n := 0
	at := time.Now().UTC()
	setNow(b, &at)
	measure := func(threshold int64) (life, sweep float64) {
		old := keptValueThreshold
		keptValueThreshold = threshold
		defer func() { keptValueThreshold = old }()
		c0 := processCPUTime(b)
		s, err := Open(filepath.Join(b.TempDir(), "ledger"), onTestClock(quiet))
		if err != nil {
			b.Fatal(err)
		}
		acct := ledgertest.MustAccount(b, s, "kept@example.com").ID
		const batch = 16
		for range b.N * 1000 / batch {
			puts := make([]ledger.GenerationPut, batch)
			t := at
			for j := range puts {
				n++
				puts[j] = ledger.GenerationPut{
					Record: ledger.GenerationRecord{AccountID: acct, RequestID: fmt.Sprintf("req_%026d", n), Mode: ledger.Live,
						Tool: "summarize", Language: "en", State: ledger.GenerationCompleted, Created: t, Finished: t,
						Expires: t.Add(time.Hour), OutputTokens: 40, FinishReason: "stop", Pieces: 8, Bytes: 200},
					Chunks: [][]byte{chunk},
				}
			}
			if err := s.PutGenerations(bg, puts...); err != nil {
				b.Fatal(err)
			}
		}
		at = at.Add(2 * time.Hour) // every window has passed
		c1 := processCPUTime(b)
		if swept, err := s.DeleteExpiredGenerations(bg); err != nil || swept != b.N*1000/batch*batch {
			b.Fatalf("the sweep deleted %d generations of %d: %v", swept, b.N*1000/batch*batch, err)
		}
		c2 := processCPUTime(b)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		gens := float64(b.N * 1000)
		return float64((processCPUTime(b) - c0).Microseconds()) / gens, float64((c2 - c1).Microseconds()) / gens
	}
	b.ResetTimer()
	kept, sweep := measure(keptValueThreshold)
	inline, _ := measure(1 << 20) // Badger's default: values inline
	b.ReportMetric(kept, "kept-cpu-us/gen")
	b.ReportMetric(sweep, "sweep-cpu-us/gen")
	b.ReportMetric(inline, "inline-cpu-us/gen")
	b.ReportMetric(kept/inline, "kept/inline")
	// The regression guard: the value log costs about half of the inline store (0.37-0.54x
	// measured); near the inline store's cost it would no longer be worth its files. It judges
	// runs of 100,000 generations or more (the testing package's first call has b.N 1: a
	// thousand generations, too few for a compaction).
	if b.N >= 100 && kept/inline > 0.75 {
		b.Errorf("keeping a generation cost %.1f us of CPU, %.2fx the %.1f of a store that keeps it inline: above the guard of 0.75x", kept, kept/inline, inline)
	}
	// The sweep deletes a generation by its final index entry alone (0.6x the rest of its life
	// measured); reading each record back made it 2.9x.
	if b.N >= 100 && sweep > kept-sweep {
		b.Errorf("sweeping a kept generation cost %.1f us of CPU, more than the %.1f of the rest of its life: above the guard", sweep, kept-sweep)
	}
}
