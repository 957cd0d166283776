package ledger

import (
	"encoding/json"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// TestLastUsedFlushedNotWrittenPerLookup: a lookup records its use in memory only; the flush
// and Close write it, and it survives a reopen.
func TestLastUsedFlushedNotWrittenPerLookup(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	s := openDir(t, dir, quiet)
	a := mustAccount(t, s, "lu@example.com")
	full, k, err := s.CreateKey(bg, a.ID, Live, "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	stored := func() Key {
		var rec keyRecord
		err := s.db.View(func(txn *badger.Txn) error {
			v, _, err := getValue(txn, keyRecordKey(a.ID, k.ID))
			if err != nil {
				return err
			}
			return json.Unmarshal(v, &rec)
		})
		if err != nil {
			t.Fatal(err)
		}
		return rec.Key
	}
	t0 = t0.Add(time.Minute)
	if _, _, err := s.LookupKey(bg, full); err != nil {
		t.Fatal(err)
	}
	if !stored().LastUsed.IsZero() {
		t.Fatal("a lookup wrote to disk")
	}
	if err := s.flushLastUsed(true); err != nil {
		t.Fatal(err)
	}
	if got := stored().LastUsed; !got.Equal(t0) {
		t.Fatalf("flushed last use %v, want %v", got, t0)
	}
	// Close flushes too.
	t0 = t0.Add(time.Minute)
	if _, _, err := s.LookupKey(bg, full); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, quiet)
	keys, err := s.ListKeys(bg, a.ID)
	if err != nil || len(keys) != 1 || !keys[0].LastUsed.Equal(t0) {
		t.Fatalf("after reopen: %+v %v", keys, err)
	}
}
