package badgerledger

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// keptKeys counts the kept store's keys by their prefix byte.
func keptKeys(t *testing.T, s *Badger) map[byte]int {
	t.Helper()
	n := map[byte]int{}
	db := s.kept.opened()
	if db == nil {
		return n
	}
	if err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n[it.Item().Key()[0]]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func keptRecord(acct, rid string, state ledger.GenerationState, chunks int) ledger.GenerationRecord {
	at := now().UTC()
	return ledger.GenerationRecord{AccountID: acct, RequestID: rid, Mode: ledger.Live, Tool: "summarize", State: state,
		Created: at, Finished: at, Expires: at.Add(time.Hour), Pieces: chunks, Bytes: int64(10 * chunks), FinishReason: "stop"}
}

// A generation that comes whole in one put is one key of the kept store (and its entry in the
// sweep's index), with no key per chunk; one written in several puts keeps a key per chunk;
// both read back chunk for chunk from any number on, and both are deleted whole.
func TestGenerationKeptWholeIsOneKey(t *testing.T) {
	s := openDir(t, t.TempDir(), quiet)
	acct := ledgertest.MustAccount(t, s, "whole@example.com").ID
	chunks := [][]byte{[]byte("first sealed chunk"), []byte("second"), bytes.Repeat([]byte{0xff}, 300)}

	if err := s.PutGenerations(bg, ledger.GenerationPut{Record: keptRecord(acct, "req_whole", ledger.GenerationCompleted, 3), Chunks: chunks}); err != nil {
		t.Fatal(err)
	}
	if n := keptKeys(t, s); n[prefixGeneration] != 1 || n[prefixGenChunk] != 0 || n[prefixGenExpiry] != 1 {
		t.Fatalf("a whole generation left keys %v: want one record, no chunk, one index entry", n)
	}

	// In two puts: the first while it runs, the last with the rest.
	running := keptRecord(acct, "req_parts", ledger.GenerationRunning, 1)
	running.Finished = time.Time{}
	if err := s.PutGenerations(bg, ledger.GenerationPut{Record: running, Chunks: chunks[:1]}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutGenerations(bg, ledger.GenerationPut{Record: keptRecord(acct, "req_parts", ledger.GenerationCompleted, 3), First: 1, Chunks: chunks[1:]}); err != nil {
		t.Fatal(err)
	}
	if n := keptKeys(t, s); n[prefixGeneration] != 2 || n[prefixGenChunk] != 3 {
		t.Fatalf("keys after a generation in two puts: %v, want 2 records and its 3 chunks", n)
	}

	for _, rid := range []string{"req_whole", "req_parts"} {
		for from := range len(chunks) + 2 {
			rec, got, err := s.GetGeneration(bg, acct, rid, from)
			if err != nil {
				t.Fatalf("%s from %d: %v", rid, from, err)
			}
			want := chunks[min(from, len(chunks)):]
			if rec.Chunks != 3 || rec.State != ledger.GenerationCompleted || len(got) != len(want) {
				t.Fatalf("%s from %d: record %+v, %d chunks, want %d", rid, from, rec, len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("%s from %d: chunk %d is %q, want %q", rid, from, from+i, got[i], want[i])
				}
			}
		}
	}

	if err := s.DeleteGeneration(bg, acct, "req_whole"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetGeneration(bg, acct, "req_whole", 0); err == nil {
		t.Fatal("a deleted whole generation is still read")
	}
	if n := keptKeys(t, s); n[prefixGeneration] != 1 || n[prefixGenChunk] != 3 {
		t.Fatalf("keys after deleting the whole generation: %v", n)
	}
}

// The sweep deletes a generation once its window has passed, whole or in parts, every key of
// it, and counts each once: not a generation deleted before it, and not again at the entry of
// an expiry its final put moved.
func TestGenerationSweptOnceWholeOrInParts(t *testing.T) {
	at := time.Now().UTC()
	setNow(t, &at)
	s := openDir(t, t.TempDir(), quiet)
	acct := ledgertest.MustAccount(t, s, "swept@example.com").ID
	for i := range 3 {
		if err := s.PutGenerations(bg, ledger.GenerationPut{Record: keptRecord(acct, fmt.Sprint("req_", i), ledger.GenerationCompleted, 1),
			Chunks: [][]byte{[]byte("text")}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		rid := fmt.Sprint("req_parts_", i)
		running := keptRecord(acct, rid, ledger.GenerationRunning, 1)
		running.Finished, running.Expires = time.Time{}, at.Add(2*time.Hour) // a window from the start, with the longest a generation runs
		if err := s.PutGenerations(bg, ledger.GenerationPut{Record: running, Chunks: [][]byte{[]byte("one")}}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutGenerations(bg, ledger.GenerationPut{Record: keptRecord(acct, rid, ledger.GenerationCompleted, 2), First: 1,
			Chunks: [][]byte{[]byte("two")}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := keptKeys(t, s); n[prefixGenExpiry] != 7 || n[prefixGenChunk] != 4 {
		t.Fatalf("keys before the sweep: %v, want 7 index entries and 4 chunks", n)
	}
	for _, rid := range []string{"req_1", "req_parts_1"} {
		if err := s.DeleteGeneration(bg, acct, rid); err != nil {
			t.Fatal(err)
		}
	}
	at = at.Add(3 * time.Hour)
	if n, err := s.DeleteExpiredGenerations(bg); err != nil || n != 3 {
		t.Fatalf("sweep: %d deleted, want the 3 not deleted before; %v", n, err)
	}
	if n := keptKeys(t, s); len(n) != 0 {
		t.Fatalf("keys left after the sweep: %v", n)
	}
}

// A generation whose window ends within the second the sweep runs in stays until it has ended,
// and a later sweep deletes it.
func TestGenerationSweptWithinItsLastSecond(t *testing.T) {
	base := time.Now().UTC().Truncate(time.Second).Add(time.Hour)
	at := base.Add(-time.Hour)
	setNow(t, &at)
	s := openDir(t, t.TempDir(), quiet)
	acct := ledgertest.MustAccount(t, s, "second@example.com").ID
	rec := keptRecord(acct, "req_edge", ledger.GenerationCompleted, 1)
	rec.Expires = base.Add(500 * time.Millisecond)
	if err := s.PutGenerations(bg, ledger.GenerationPut{Record: rec, Chunks: [][]byte{[]byte("text")}}); err != nil {
		t.Fatal(err)
	}
	at = base.Add(200 * time.Millisecond) // the same second, before its end
	if n, err := s.DeleteExpiredGenerations(bg); err != nil || n != 0 {
		t.Fatalf("sweep before the end: %d deleted, %v", n, err)
	}
	if _, got, err := s.GetGeneration(bg, acct, "req_edge", 0); err != nil || len(got) != 1 {
		t.Fatalf("read before the end: %v, %d chunks", err, len(got))
	}
	at = base.Add(600 * time.Millisecond) // the same second, after its end
	if n, err := s.DeleteExpiredGenerations(bg); err != nil || n != 1 {
		t.Fatalf("sweep after the end: %d deleted, %v", n, err)
	}
	if n := keptKeys(t, s); len(n) != 0 {
		t.Fatalf("keys left after the sweep: %v", n)
	}
}

// Kept text an earlier version wrote for a generation that came whole (a key per chunk and the
// record alone) stays readable.
func TestGenerationKeptInPartsByEarlierVersionReadable(t *testing.T) {
	s := openDir(t, t.TempDir(), quiet)
	acct := ledgertest.MustAccount(t, s, "earlier@example.com").ID
	rec := keptRecord(acct, "req_earlier", ledger.GenerationCompleted, 2)
	rec.Chunks = 2
	db, err := s.kept.get()
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error {
		for i, c := range []string{"one", "two"} {
			if err := txn.Set(genChunkKey(acct, rec.RequestID, i), []byte(c)); err != nil {
				return err
			}
		}
		return txn.Set(generationKey(acct, rec.RequestID), generationJSON(&rec))
	}); err != nil {
		t.Fatal(err)
	}
	_, got, err := s.GetGeneration(bg, acct, rec.RequestID, 0)
	if err != nil || len(got) != 2 || string(got[0]) != "one" || string(got[1]) != "two" {
		t.Fatalf("earlier layout: %v, %q", err, got)
	}
}

// A whole generation's value that is cut short or lies about its chunks is refused with an
// error, never read past its end.
func TestGenerationWholeValueDamaged(t *testing.T) {
	rec := keptRecord("acct_x", "req_x", ledger.GenerationCompleted, 2)
	rec.Chunks = 2
	v := wholeValue(&rec, [][]byte{[]byte("abc"), []byte("defgh")})
	if got, inline, whole, err := parseGenerationValue(v); err != nil || !whole || len(inline) != 2 || got.RequestID != "req_x" {
		t.Fatalf("intact: %v %v %d", err, whole, len(inline))
	}
	for cut := 1; cut < 12; cut++ {
		if _, _, _, err := parseGenerationValue(v[:cut]); err == nil {
			t.Fatalf("cut to %d bytes: read without an error", cut)
		}
	}
	lie := wholeValue(&rec, [][]byte{[]byte("abc")}) // the record says 2
	if _, _, _, err := parseGenerationValue(lie); err == nil {
		t.Fatal("a value with fewer chunks than its record names was read")
	}
}

// FuzzGenerationValue: any bytes parse to a record or an error, and a whole value reads back
// the record and chunks it was made of.
func FuzzGenerationValue(f *testing.F) {
	f.Add([]byte("abc"), []byte(""), uint8(2))
	f.Add([]byte{}, []byte{wholeMark, 5, 0}, uint8(0))
	f.Fuzz(func(t *testing.T, text, raw []byte, parts uint8) {
		parseGenerationValue(raw) // must not panic
		parseSweepEntry(raw)
		if n, ok := parseSweepEntry(sweepEntry(false, int(parts)*1000)); !ok || n != int(parts)*1000 {
			t.Fatalf("sweep entry of %d chunk keys read back as %d, %v", int(parts)*1000, n, ok)
		}
		var chunks [][]byte
		for i := range int(parts % 8) {
			chunks = append(chunks, text[:len(text)*i/8])
		}
		rec := keptRecord("acct_f", "req_f", ledger.GenerationCompleted, len(chunks))
		rec.Chunks = len(chunks)
		got, inline, whole, err := parseGenerationValue(wholeValue(&rec, chunks))
		if err != nil || !whole || got.Chunks != len(chunks) || len(inline) != len(chunks) {
			t.Fatalf("round trip: %v, whole %v, %d chunks of %d", err, whole, len(inline), len(chunks))
		}
		for i := range chunks {
			if !bytes.Equal(inline[i], chunks[i]) {
				t.Fatalf("chunk %d: %q, want %q", i, inline[i], chunks[i])
			}
		}
	})
}
