package badgerledger

import (
	"slices"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// dropLotOrder deletes the expiry order of the lots of entries seqs of acct.
func dropLotOrder(t *testing.T, s *Badger, acct string, seqs ...uint64) {
	t.Helper()
	for _, seq := range seqs {
		a, err := s.account(acct)
		if err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		l := *a.lot(seq)
		a.mu.Unlock()
		s.unpin(a)
		if err := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(lotDueKey(acct, &l)) }); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLotExpiryOrder: the sweep finds the lots to expire through their expiry order; verify
// reports a lot missing from it (it would never expire), and a ledger whose lots have no order
// at all (written before it existed) gets one at Open, so its credits still expire.
func TestLotExpiryOrder(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	setNow(t, &at)
	dir := t.TempDir()
	s := openDir(t, dir, quiet)
	a := ledgertest.MustAccount(t, s, "order@example.com").ID
	var seqs []uint64
	for _, in := range []time.Duration{time.Hour, 2 * time.Hour} {
		g, err := s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 3, Expires: at.Add(in)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, g.Entry.Seq)
	}
	ledgertest.VerifyClean(t, s)

	// One lot out of the order: verify says so.
	dropLotOrder(t, s, a, seqs[0])
	r, err := s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, p := range r.Problems {
		kinds = append(kinds, p.Kind)
	}
	if r.OK || !slices.Contains(kinds, "lot_not_indexed") {
		t.Fatalf("verify with a lot missing from the expiry order: %+v", r)
	}

	// No order at all: Open writes it, and both lots expire when their time comes.
	dropLotOrder(t, s, a, seqs[1])
	s.Close()
	s = openDir(t, dir, quiet)
	ledgertest.VerifyClean(t, s)
	at = at.Add(90 * time.Minute)
	if _, err := s.sweep(); err != nil {
		t.Fatal(err)
	}
	if b := ledgertest.MustBalance(t, s, a); b.Available != 3 {
		t.Fatalf("after the first expiry: %+v, want 3 available", b)
	}
	at = at.Add(time.Hour)
	if _, err := s.sweep(); err != nil {
		t.Fatal(err)
	}
	if b := ledgertest.MustBalance(t, s, a); b.Available != 0 {
		t.Fatalf("after the second expiry: %+v, want 0 available", b)
	}
	ledgertest.VerifyClean(t, s)
}
