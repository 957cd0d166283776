//go:build unix

package badgerledger

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// keptLogBytes is the size of the kept store's value-log files.
func keptLogBytes(t *testing.T, dir string) (int64, int) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, keptDirName))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	files := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".vlog") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Sys().(*syscall.Stat_t).Blocks * 512 // what the disk holds: the files are sparse
		files++
	}
	return n, files
}

// The kept text lives in the kept store's value log: once its window has passed, the sweep
// deletes it and the value-log GC gives its files back to the disk, so kept text does not grow
// the directory without end.
func TestKeptTextSpaceIsReclaimed(t *testing.T) {
	at := time.Now().UTC()
	setNow(t, &at)
	dir := t.TempDir()
	s := openDir(t, dir, quiet)
	acct := ledgertest.MustAccount(t, s, "kept@example.com").ID
	chunk := make([]byte, 16<<10)
	rand.Read(chunk)
	const gens = 3000 // 48 MiB of text: three of the kept store's 16 MiB value-log files
	put := func(i int) {
		t.Helper()
		rec := ledger.GenerationRecord{AccountID: acct, RequestID: fmt.Sprintf("req_%d", i), Mode: ledger.Live, State: ledger.GenerationCompleted,
			Created: at, Finished: at, Expires: at.Add(time.Minute), Pieces: 1, Bytes: int64(len(chunk))}
		if err := s.PutGenerations(bg, ledger.GenerationPut{Record: rec, Chunks: [][]byte{chunk}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range gens {
		put(i)
	}
	full, files := keptLogBytes(t, dir)
	if full < gens*int64(len(chunk)) || files < 3 {
		t.Fatalf("the kept text is not in the value log: %d bytes in %d files", full, files)
	}
	if _, chunks, err := s.GetGeneration(bg, acct, "req_7", 0); err != nil || len(chunks) != 1 || string(chunks[0]) != string(chunk) {
		t.Fatalf("reading a kept generation back: %v (%d chunks)", err, len(chunks))
	}

	// The window passes: the sweep deletes every generation, the store flushes and compacts
	// its tables (as more writes would), and the GC removes the value-log files they emptied.
	at = at.Add(2 * time.Minute)
	n, err := s.DeleteExpiredGenerations(bg)
	if err != nil || n != gens {
		t.Fatalf("sweep: %d of %d deleted, %v", n, gens, err)
	}
	// Every close flushes the memtable into a table of level 0; at five of them Badger compacts
	// them into the level below, where the deletions meet the keys they delete and the value
	// log's files they emptied are counted as garbage, which the GC then removes.
	for i := range 6 {
		put(gens + i)
		s.Close()
		s = openDir(t, dir, quiet)
		if _, err := s.kept.get(); err != nil {
			t.Fatal(err)
		}
	}
	db := s.kept.opened()
	for deadline := time.Now().Add(time.Minute); db.Levels()[0].NumTables > 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	s.runGC()
	left, files := keptLogBytes(t, dir)
	t.Logf("value log: %d MiB in use before the window passed, %d MiB in %d files after", full>>20, left>>20, files)
	if left > full/2 {
		t.Fatalf("the value log still holds %d of %d bytes after the window passed and the GC ran", left, full)
	}
	if _, _, err := s.GetGeneration(bg, acct, "req_7", 0); err == nil {
		t.Fatal("an expired generation is still read")
	}
}

// Kept text that an earlier version wrote inline in the kept store's tables stays readable
// once the store writes to its value log, and the two kinds live side by side: the first put
// leaves the value log as it was, the second grows it by its text.
func TestKeptTextWrittenInlineStaysReadable(t *testing.T) {
	dir := t.TempDir()
	old := keptValueThreshold
	t.Cleanup(func() { keptValueThreshold = old })
	keptValueThreshold = 1 << 20 // Badger's default, as before: values inline
	s := openDir(t, dir, quiet)
	acct := ledgertest.MustAccount(t, s, "inline@example.com").ID
	at := now().UTC()
	put := func(s *Badger, rid string, text []byte) {
		t.Helper()
		rec := ledger.GenerationRecord{AccountID: acct, RequestID: rid, Mode: ledger.Live, State: ledger.GenerationCompleted,
			Created: at, Finished: at, Expires: at.Add(time.Hour), Pieces: 1, Bytes: int64(len(text))}
		var chunks [][]byte // of 64 KiB, the most a chunk holds
		for c := range slices.Chunk(text, 64<<10) {
			chunks = append(chunks, c)
		}
		if err := s.PutGenerations(bg, ledger.GenerationPut{Record: rec, Chunks: chunks}); err != nil {
			t.Fatal(err)
		}
	}
	const size = 128 << 10
	before, after := bytes.Repeat([]byte("written inline; "), size/16), bytes.Repeat([]byte("into value logs;"), size/16)
	put(s, "req_inline", before)
	if n, _ := keptLogBytes(t, dir); n >= size {
		t.Fatalf("a put with values inline left %d bytes in the value log", n)
	}
	s.Close()
	keptValueThreshold = old
	s = openDir(t, dir, quiet)
	vlog0, _ := keptLogBytes(t, dir)
	put(s, "req_vlog", after)
	if vlog1, _ := keptLogBytes(t, dir); vlog1-vlog0 < size {
		t.Fatalf("the value log grew by %d bytes for a text of %d", vlog1-vlog0, size)
	}
	for rid, want := range map[string][]byte{"req_inline": before, "req_vlog": after} {
		rec, chunks, err := s.GetGeneration(bg, acct, rid, 0)
		if err != nil || !bytes.Equal(bytes.Join(chunks, nil), want) || rec.Bytes != int64(len(want)) {
			t.Fatalf("%s: %v, %d chunks", rid, err, len(chunks))
		}
	}
}
