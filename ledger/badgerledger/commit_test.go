package badgerledger

import (
	"fmt"
	"sync"
	"testing"
	"time"

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
