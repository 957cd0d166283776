package badgerledger

import (
	"bytes"
	"io"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// TestBackupFormat: the ledger's own backup and Badger's db.Backup (what earlier versions wrote)
// restore to the same ledger, so backups taken before and after read back alike, and records
// with a lifetime (sessions) keep it.
func TestBackupFormat(t *testing.T) {
	s := openDir(t, t.TempDir(), quiet)
	keys := fill(t, s)
	want := dumpStore(t, s)
	active := ""
	for _, a := range want.Accounts {
		if a.Status == ledger.StatusActive {
			active = a.ID
		}
	}
	tok, _, err := s.CreateSession(bg, active, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var ours, badgers bytes.Buffer
	if err := s.Backup(bg, &ours); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Backup(&badgers, 0); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*bytes.Buffer{"ours": &ours, "badger's": &badgers} {
		dir := filepath.Join(t.TempDir(), "restored")
		if err := Restore(dir, b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := openDir(t, dir, quiet)
		checkSame(t, r, want, keys)
		ledgertest.VerifyClean(t, r)
		if _, _, err := r.GetSession(bg, tok); err != nil {
			t.Fatalf("%s: the session did not survive the backup: %v", name, err)
		}
		r.Close()
	}
}

// TestBackupMemory: a backup holds a batch of records at a time, not the buffers of Badger's
// parallel stream (32 MiB each, up to 32 of them queued), so that backing up a large ledger
// inside the server does not take gigabytes from it. The heap is sampled at every write.
func TestBackupMemory(t *testing.T) {
	dir := t.TempDir()
	if _, err := genLedger(dir, genSpec{Accounts: 2000, Keys: 4000, Entries: 100_000, Big: 1, BigEntries: 20_001,
		Now: time.Now().UTC(), Span: 30 * 24 * time.Hour, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	s := openDir(t, dir, quiet)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	w := &heapWriter{}
	if err := s.Backup(bg, w); err != nil {
		t.Fatal(err)
	}
	if w.n < 10<<20 {
		t.Fatalf("backup of %d bytes: the ledger is too small to show anything", w.n)
	}
	// Badger's block cache (16 MiB, badgerOptions) fills as the backup reads; Badger's own
	// db.Backup took the heap 248 MiB up here.
	if grew := int64(w.peak) - int64(before); grew > 32<<20 {
		t.Fatalf("the heap grew by %d MiB during a backup of %d MiB", grew>>20, w.n>>20)
	}
}

// heapWriter discards what it is given and notes the heap in use at every write, after a
// collection, so that garbage not yet collected does not count: what the backup holds does.
type heapWriter struct {
	n    int
	peak uint64
}

func (h *heapWriter) Write(p []byte) (int, error) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.peak = max(h.peak, ms.HeapInuse)
	h.n += len(p)
	return len(p), nil
}

var _ io.Writer = (*heapWriter)(nil)
