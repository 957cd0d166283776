package badgerledger

import (
	"encoding/json"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// TestLastUsedStoredWithHold: a hold notes its key's last use (a lookup does not); a key without
// a budget is not written by the hold itself, and its last use is stored by the next flush of
// last uses, and by Close, so that it survives a reopen.
func TestLastUsedStoredWithHold(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	s := openDir(t, dir, quiet)
	a := ledgertest.MustAccount(t, s, "lu@example.com")
	full, k, err := s.CreateKey(bg, a.ID, ledger.Live, "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	stored := func() ledger.Key {
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
	ledgertest.MustGrant(t, s, a.ID, ledger.Live, 5)
	t0 = t0.Add(time.Minute)
	if _, _, err := s.LookupKey(bg, full); err != nil {
		t.Fatal(err)
	}
	if err := s.flushLastUsed(true); err != nil {
		t.Fatal(err)
	}
	if !stored().LastUsed.IsZero() {
		t.Fatal("a lookup was recorded as a use")
	}
	if err := ledgertest.HoldOn(s, a.ID, k.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	if got := stored().LastUsed; !got.IsZero() {
		t.Fatalf("the hold of a key without a budget wrote its record (last use %v)", got)
	}
	if err := s.flushLastUsed(true); err != nil {
		t.Fatal(err)
	}
	if got := stored().LastUsed; !got.Equal(t0) {
		t.Fatalf("stored last use %v, want %v", got, t0)
	}
	t0 = t0.Add(time.Minute)
	if err := ledgertest.HoldOn(s, a.ID, k.ID, "r2"); err != nil {
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
