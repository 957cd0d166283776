package badgerledger

import (
	"encoding/json"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// TestBadgerKeyFromEarlierRelease: a key record as the release before keys had limits wrote it
// (no limits, usage or previous secret) loads with none of them, and from then on is counted,
// limited and rolled like any other; the count survives a restart.
func TestBadgerKeyFromEarlierRelease(t *testing.T) {
	t0 := time.Date(2030, 9, 1, 8, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	dir := t.TempDir()
	s := openDir(t, dir, quiet)
	a := ledgertest.MustAccount(t, s, "old@example.com")
	full, k, err := s.CreateKey(bg, a.ID, ledger.Live, "old", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// Rewrite the record with only the fields the earlier release had.
	err = s.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(keyRecordKey(a.ID, k.ID))
		if err != nil {
			return err
		}
		v, _ := item.ValueCopy(nil)
		var m map[string]any
		if err := json.Unmarshal(v, &m); err != nil {
			return err
		}
		old := map[string]any{}
		for _, f := range []string{"id", "account_id", "mode", "name", "prefix", "last4", "created", "digest"} {
			old[f] = m[f]
		}
		b, _ := json.Marshal(old)
		return txn.Set(keyRecordKey(a.ID, k.ID), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openDir(t, dir, quiet)
	got, _, err := s.LookupKey(bg, full)
	if err != nil || got.HasBudget() || got.AllowedTools != nil || got.Usage != (ledger.KeyUsage{}) || !got.Rolled.IsZero() {
		t.Fatalf("an earlier release's key: %+v %v", got, err)
	}
	ledgertest.MustGrant(t, s, a.ID, ledger.Live, 5)
	if _, err := s.UpdateKey(bg, a.ID, k.ID, ledger.KeySettings{Name: "old", Limits: ledger.KeyLimits{BudgetTotal: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := ledgertest.HoldOn(s, a.ID, k.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(bg, a.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openDir(t, dir, quiet)
	if err := ledgertest.HoldOn(s, a.ID, k.ID, "r2"); err != nil {
		t.Fatal(err)
	}
	ledgertest.WantBudget(t, ledgertest.HoldOn(s, a.ID, k.ID, "r3"), "total", 2, time.Time{})
	ledgertest.VerifyClean(t, s)
}
