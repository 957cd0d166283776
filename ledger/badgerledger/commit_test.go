package badgerledger

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

func setGroupWait(s *Badger, d time.Duration) {
	s.c.mu.Lock()
	s.c.groupWait = d
	s.c.mu.Unlock()
}

// While enough generations are open that more settles are coming, their settles share one
// commit: the committer holds the first back until groupOps are queued (the window here is
// an hour, so only the count can end it).
func TestGroupWindowSharesOneCommit(t *testing.T) {
	s := openDir(t, t.TempDir(), Options{})
	a := ledgertest.MustAccount(t, s, "group@example.com").ID
	const open = groupOps + groupSiblings
	ledgertest.MustGrant(t, s, a, ledger.Live, open)
	setLazyWait(s, time.Hour)
	setGroupWait(s, time.Hour)
	for i := range open {
		if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: fmt.Sprintf("req_g%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.c.barrier(); err != nil { // the reservations, queued past groupOps: no wait
		t.Fatal(err)
	}
	commits := s.c.commits.Load()
	var wg sync.WaitGroup
	errs := make(chan error, groupOps)
	for i := range groupOps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Settle(bg, a, fmt.Sprintf("req_g%d", i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := s.c.commits.Load() - commits; n != 1 {
		t.Fatalf("%d settles with %d generations open took %d commits, want 1", groupOps, open, n)
	}
	if b, err := s.Balance(bg, a); err != nil || b.Balance != groupSiblings || b.Available != 0 {
		t.Fatalf("balance %+v %v", b, err)
	}
}

// With fewer generations open than groupSiblings nothing waits for company: one client's
// settle commits at once (with an hour's window, waiting would not end within the test).
func TestGroupWindowNotBelowSiblings(t *testing.T) {
	s := openDir(t, t.TempDir(), Options{})
	a := ledgertest.MustAccount(t, s, "alone@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, groupSiblings)
	setGroupWait(s, time.Hour)
	for i := range groupSiblings - 1 {
		if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: fmt.Sprintf("req_a%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Settle(bg, a, "req_a0")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("a settle with %d generations open waited for the group window", groupSiblings-1)
	}
}

// An Idempotency-Key's record is waited for before the client's first byte: it ends the group
// window even with many generations open (the window here is 30 s).
func TestGroupWindowEndsForIdempotencyKey(t *testing.T) {
	s := openDir(t, t.TempDir(), Options{})
	a := ledgertest.MustAccount(t, s, "idem-group@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, groupSiblings)
	for i := range groupSiblings {
		if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: fmt.Sprintf("req_i%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.c.barrier(); err != nil {
		t.Fatal(err)
	}
	setGroupWait(s, 30*time.Second) // a failure ends within it
	done := make(chan error, 1)
	go func() {
		_, _, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "idem-1", RequestID: "req_idem", Fingerprint: "f", Created: time.Now()})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("an Idempotency-Key's record with %d generations open waited for the group window", groupSiblings)
	}
}

// A generation's text digest rides in the next commit (the next generation's settle) instead of
// a disk sync of its own, and its put returns once it is durable: with one client at a time, a
// generation costs one commit, not two.
func TestReceiptDigestRidesInTheNextCommit(t *testing.T) {
	s := openDir(t, t.TempDir(), Options{})
	a := ledgertest.MustAccount(t, s, "digest-ride@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, 2)
	setLazyWait(s, time.Hour) // only another commit can carry the digest
	generation := func(rid string) {
		if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: rid, NewID: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Settle(bg, a, rid); err != nil {
			t.Fatal(err)
		}
	}
	generation("req_ride1")
	t0 := time.Now().UTC()
	rec := ledger.GenerationRecord{AccountID: a, RequestID: "req_ride1", Mode: ledger.Live, Tool: "summarizer", State: ledger.GenerationCompleted,
		Created: t0, Finished: t0, Expires: t0.Add(time.Minute), Pieces: 1, Bytes: 5}
	sum := sha256.Sum256([]byte("hello"))
	commits := s.c.commits.Load()
	put := make(chan error, 1)
	go func() {
		put <- s.PutGenerations(bg, ledger.GenerationPut{Record: rec, Chunks: [][]byte{[]byte("c0")}, TextSHA256: sum[:]})
	}()
	select {
	case err := <-put:
		t.Fatalf("the digest's put returned before any commit carried it (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	generation("req_ride2")
	if err := <-put; err != nil {
		t.Fatal(err)
	}
	if n := s.c.commits.Load() - commits; n != 1 {
		t.Fatalf("a generation and the previous one's digest took %d commits, want 1", n)
	}
	if d, err := s.ReceiptDigest(bg, a, "req_ride1"); err != nil || !bytes.Equal(d, sum[:]) {
		t.Fatalf("the digest: %x %v", d, err)
	}
}

// openHoldVersions counts every version of the open-hold marker of rid that Badger holds,
// tombstones included.
func openHoldVersions(t *testing.T, s *Badger, acct, rid string) int {
	t.Helper()
	n := 0
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{AllVersions: true, Prefix: openHoldKey(acct, rid)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if bytes.Equal(it.Item().Key(), openHoldKey(acct, rid)) {
				n++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A hold and its settle that ride in one commit leave no trace of the hold's open marker: it
// was made and deleted within the batch, so neither write reaches Badger. A hold committed on
// its own writes the marker, and its settle a tombstone. Either way the ledger verifies and a
// restart finds no hold left open.
func TestOpenHoldMarkerCancelledInOneCommit(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, quiet)
	acct := ledgertest.MustAccount(t, s, "marker@example.com").ID
	ledgertest.MustGrant(t, s, acct, ledger.Live, 10)

	setLazyWait(s, time.Hour) // the reservation waits for the settle's commit
	if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: "together", NewID: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(bg, acct, "together"); err != nil {
		t.Fatal(err)
	}
	if n := openHoldVersions(t, s, acct, "together"); n != 0 {
		t.Fatalf("a hold settled in the same commit left %d versions of its open marker", n)
	}

	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: "apart"}); err != nil {
		t.Fatal(err)
	}
	if n := openHoldVersions(t, s, acct, "apart"); n != 1 {
		t.Fatalf("a durable hold: %d versions of its open marker, want 1", n)
	}
	if _, err := s.Settle(bg, acct, "apart"); err != nil {
		t.Fatal(err)
	}
	if n := openHoldVersions(t, s, acct, "apart"); n != 2 {
		t.Fatalf("its settle: %d versions of the open marker, want 2 (the marker and its tombstone)", n)
	}
	if rep, err := s.Verify(bg); err != nil || !rep.OK {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
	s.Close()
	s = openDir(t, dir, quiet)
	if bal, err := s.Balance(bg, acct); err != nil || bal.Balance != 8 || bal.Available != 8 {
		t.Fatalf("after a restart: %+v %v, want 8 credits and none held", bal, err)
	}
}
