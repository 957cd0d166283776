package badgerledger

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestOpenMemory: what an open ledger holds in memory for each account with two keys (the
// working state memory.go keeps), so that a ledger of a million accounts fits the memory
// docs/SCALING.md gives for it. Two ledgers of different sizes are opened and the difference of
// their heaps divided by the difference of their accounts, so that Badger's own buffers, the
// same for both, do not count.
func TestOpenMemory(t *testing.T) {
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	held := map[int]int64{}
	for _, n := range []int{10_000, 40_000} {
		dir := t.TempDir()
		if _, err := genLedger(dir, genSpec{Accounts: n, Keys: 2 * n, Entries: 3 * n, Big: 1, BigEntries: 3,
			Now: time.Now().UTC(), Span: 30 * 24 * time.Hour, Seed: 9}); err != nil {
			t.Fatal(err)
		}
		before := heap()
		s, err := Open(dir, quiet)
		if err != nil {
			t.Fatal(err)
		}
		held[n] = heap() - before
		if got := len(s.allAccounts()); got != n {
			t.Fatalf("%d accounts loaded of %d", got, n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	per := (held[40_000] - held[10_000]) / 30_000
	t.Logf("%d bytes of heap an account with two keys (%s)", per, fmt.Sprint(held))
	// About 1,600 bytes for the account and two bare keys (1,817 before the strings were shared
	// and the maps made on demand), and about 330 bytes a key for its limits, counts and roll.
	if per > 2400 {
		t.Fatalf("%d bytes of heap an account with two keys, want at most 2400", per)
	}
}
