package badgerledger

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestOpenMemory: what an open ledger holds in memory does not grow with its accounts. Two
// ledgers of two keys an account, one five times the other, are opened in turn: the heap after the
// open, and after every account was used once (a balance read), must be about the same, the
// cache holding at most its size.
func TestOpenMemory(t *testing.T) {
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	const cache = 2_000
	opened, used := map[int]int64{}, map[int]int64{}
	sizes := []int{20_000, 100_000}
	for _, n := range sizes {
		dir := t.TempDir()
		if _, err := genLedger(dir, genSpec{Accounts: n, Keys: 2 * n, Entries: 3 * n, Big: 1, BigEntries: 3,
			Now: time.Now().UTC(), Span: 30 * 24 * time.Hour, Seed: 9}); err != nil {
			t.Fatal(err)
		}
		before := heap()
		o := quiet
		o.CacheAccounts = cache
		s, err := Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		opened[n] = heap() - before
		var ids []string
		if err := s.forEachRecord([]byte{prefixAccount}, func(k, _ []byte) error {
			ids = append(ids, string(k[1:]))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(ids) != n {
			t.Fatalf("%d accounts on disk, want %d", len(ids), n)
		}
		for _, id := range ids {
			if _, err := s.Balance(bg, id); err != nil {
				t.Fatal(err)
			}
		}
		ids = nil
		used[n] = heap() - before
		if cs := s.CacheStats(); cs.Accounts > cache || cs.Loads != uint64(n) {
			t.Fatalf("after using %d accounts once: %+v, want at most %d cached and %d loads", n, cs, cache, n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	small, large := sizes[0], sizes[1]
	t.Logf("heap held after the open: %s; after every account was used once: %s", fmt.Sprint(opened), fmt.Sprint(used))
	// Badger's own buffers (its 16 MiB block cache is full at both sizes) and the cache are the
	// same for both; 4 MiB of slack for the runtime and Badger's table indexes, which grow with
	// the data on disk.
	for _, c := range []struct {
		what string
		m    map[int]int64
	}{{"the open", opened}, {"every account's use", used}} {
		if d := c.m[large] - c.m[small]; d > 4<<20 {
			t.Errorf("after %s the heap of %d accounts is %d bytes above that of %d (ratio %.2f): it grows with the accounts",
				c.what, large, d, small, float64(c.m[large])/float64(max(c.m[small], 1)))
		}
	}
}
