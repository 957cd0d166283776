package badgerledger

import (
	"encoding/json"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

func problemKinds(r ledger.VerifyReport) map[string]int {
	out := map[string]int{}
	for _, p := range r.Problems {
		out[p.Kind]++
	}
	return out
}

func TestVerifyDetectsCorruption(t *testing.T) {
	s := newMem(t)
	a := ledgertest.MustAccount(t, s, "v@example.com").ID
	b := ledgertest.MustAccount(t, s, "v2@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, 5)
	ledgertest.MustGrant(t, s, b, ledger.Live, 5)
	ledgertest.MustHold(t, s, a, ledger.Live, "r1")
	ledgertest.MustHold(t, s, b, ledger.Live, "r1")
	if _, err := s.Settle(bg, a, "r1"); err != nil {
		t.Fatal(err)
	}
	r := ledgertest.VerifyClean(t, s)
	if r.Accounts != 2 || r.Entries != 5 {
		t.Fatalf("verify counted %d accounts, %d entries", r.Accounts, r.Entries)
	}

	// A wrong balance record, written behind the ledger's back.
	if err := s.db.Update(func(txn *badger.Txn) error {
		return txn.Set(balanceKey(a), mustJSON(balanceRecord{Balance: 999, NextSeq: 4}))
	}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || len(r.Problems) != 1 || r.Problems[0].Kind != "balance_mismatch" || r.Problems[0].AccountID != a {
		t.Fatalf("corrupted balance: %+v", r)
	}

	ledgertest.MustGrant(t, s, b, ledger.Live, 1) // entry 3 of b
	// A lost entry of b: its hold entry (2) disappears.
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(entryKey(b, 2)) }); err != nil {
		t.Fatal(err)
	}
	r, err = s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	k := problemKinds(r)
	for _, want := range []string{"balance_mismatch", "seq_gap", "hold_without_entry", "open_hold_mismatch", "memory_mismatch"} {
		if k[want] == 0 {
			t.Errorf("no %s problem in %+v", want, r.Problems)
		}
	}

	// In-memory state that drifted from the entries.
	c := ledgertest.MustAccount(t, s, "v3@example.com").ID
	ledgertest.MustGrant(t, s, c, ledger.Live, 1)
	ac, _ := s.account(c)
	ac.mu.Lock()
	ac.bal = -3
	ac.mu.Unlock()
	s.unpin(ac)
	r, err = s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	var sawMem, sawNeg bool
	for _, p := range r.Problems {
		if p.AccountID == c {
			sawMem = sawMem || p.Kind == "memory_mismatch"
			sawNeg = sawNeg || p.Kind == "negative_available"
		}
	}
	if !sawMem || !sawNeg {
		t.Fatalf("drifted memory not reported: %+v", r.Problems)
	}
}

func TestVerifyNegativeBalanceInEntries(t *testing.T) {
	s := newMem(t)
	a := ledgertest.MustAccount(t, s, "n@example.com").ID
	// Entries that would take the balance below zero, as a buggy writer might leave them.
	e := ledger.Entry{Seq: 1, AccountID: a, Kind: ledger.KindAdjustment, Mode: ledger.Live, Amount: -2, BalanceAfter: -2, AvailableAfter: -2}
	if err := s.db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(entryKey(a, 1), mustJSON(e)); err != nil {
			return err
		}
		return txn.Set(balanceKey(a), mustJSON(balanceRecord{Balance: -2, NextSeq: 2}))
	}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	k := problemKinds(r)
	if r.OK || k["negative_balance"] != 1 || k["negative_available"] != 1 {
		t.Fatalf("negative entries: %+v", r.Problems)
	}
}

// TestVerifyProgress: Verify says how many accounts it has verified of those in memory, from 0
// to all of them, one account at a time.
func TestVerifyProgress(t *testing.T) {
	s := newMem(t)
	for _, e := range []string{"p1@example.com", "p2@example.com", "p3@example.com"} {
		ledgertest.MustGrant(t, s, ledgertest.MustAccount(t, s, e).ID, ledger.Live, 2)
	}
	var calls [][2]int64
	r, err := ledger.VerifyWithProgress(bg, s, func(done, total int64) { calls = append(calls, [2]int64{done, total}) })
	if err != nil || !r.OK {
		t.Fatalf("verify: %+v %v", r, err)
	}
	if want := [][2]int64{{0, 3}, {1, 3}, {2, 3}, {3, 3}}; !slices.Equal(calls, want) {
		t.Errorf("progress %v, want %v", calls, want)
	}
}

// TestVerifyMemory: Verify reads one account at a time and keeps, beyond it, the in-memory
// figures of each account and the problems, so that verifying a million accounts inside the
// server does not take gigabytes from it. The heap is sampled, after a collection, while it runs.
func TestVerifyMemory(t *testing.T) {
	dir := t.TempDir()
	if _, err := genLedger(dir, genSpec{Accounts: 20_000, Keys: 20_000, Entries: 100_000, Big: 1, BigEntries: 10_001,
		Now: time.Now().UTC(), Span: 30 * 24 * time.Hour, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	s := openDir(t, dir, quiet)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak.Store(max(peak.Load(), ms.HeapInuse))
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	r, err := s.Verify(bg)
	close(done)
	<-sampled
	if err != nil || !r.OK || r.Accounts != 20_000 {
		t.Fatalf("verify: %v, ok %v, %d accounts: %v", err, r.OK, r.Accounts, r.Problems)
	}
	// Badger's block cache (16 MiB) fills as Verify reads, and the sampled peak moves with the
	// collector's timing (22 to 25 MiB on a busy 2-core machine); the per-account maps Verify
	// kept before took the heap 34 MiB up here. The bound lies between the two.
	grew := int64(peak.Load()) - int64(before)
	t.Logf("the heap grew by %.1f MiB while verifying %d accounts", float64(grew)/(1<<20), r.Accounts)
	if grew > 29<<20 {
		t.Fatalf("the heap grew by %d MiB while verifying %d accounts", grew>>20, r.Accounts)
	}
}

// TestVerifyCodes: a code whose uses do not match its redemptions, and a redemption without its
// grant entry, are reported.
func TestVerifyCodes(t *testing.T) {
	s := newMem(t)
	a := ledgertest.MustAccount(t, s, "code@example.com").ID
	code, c := ledgertest.MustCode(t, s, ledger.NewCode{Credits: 2, MaxUses: 3})
	if _, err := s.Redeem(bg, a, code); err != nil {
		t.Fatal(err)
	}
	ledgertest.VerifyClean(t, s)
	if err := s.db.Update(func(txn *badger.Txn) error {
		v, _, err := getValue(txn, codeKey(c.ID))
		if err != nil {
			return err
		}
		var rec codeRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return err
		}
		rec.Uses = 0
		if err := txn.Set(codeKey(c.ID), mustJSON(rec)); err != nil {
			return err
		}
		return txn.Delete(grantRefKey(a, ledger.CodeReference(c.ID)))
	}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, p := range r.Problems {
		kinds = append(kinds, p.Kind)
	}
	if r.OK || !slices.Contains(kinds, "code_uses") || !slices.Contains(kinds, "code_redemption") {
		t.Fatalf("verify of a damaged code: %+v", r)
	}
}

// TestVerifyLots: a lot whose held credits no open hold took, and an expire entry that took
// more than its grant gave, are reported.
func TestVerifyLots(t *testing.T) {
	s := newMem(t)
	a := ledgertest.MustAccount(t, s, "lots@example.com").ID
	g, err := s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 4,
		Expires: s.now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.VerifyClean(t, s)
	if err := s.db.Update(func(txn *badger.Txn) error {
		l := ledger.Lot{Seq: g.Entry.Seq, Amount: 4, Remaining: 4, Held: 2, Expires: s.now().Add(time.Hour)}
		if err := txn.Set(lotKey(a, l.Seq), mustJSON(l)); err != nil {
			return err
		}
		e := ledger.Entry{Seq: 2, AccountID: a, Kind: ledger.KindExpire, Mode: ledger.Live, Amount: -5, BalanceAfter: -1,
			AvailableAfter: -1, Reason: ledger.ExpireReason(g.Entry.Seq), Time: s.now()}
		return txn.Set(entryKey(a, 2), entryJSON(&e))
	}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, p := range r.Problems {
		kinds = append(kinds, p.Kind)
	}
	if r.OK || !slices.Contains(kinds, "lot_held_mismatch") || !slices.Contains(kinds, "expired_too_much") {
		t.Fatalf("verify of damaged lots: %+v", r)
	}
}
