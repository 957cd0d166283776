package ledgertest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// 10,000 concurrent holds against 1,000 credits: exactly 1,000 succeed. A third of the winners
// settle at once, while other holds are still being attempted (a settle frees no credit); the
// rest are settled or voided only after every hold attempt has finished, so that no voided
// credit goes back into the pool during the race and the count stays exact.
func testConcurrentHolds(t *testing.T, eng engine) {
	const attempts, credits = 10000, 1000
	s := eng.open(t, 0)
	a := MustAccount(t, s, "race@example.com").ID
	MustGrant(t, s, a, ledger.Live, credits)

	var negative atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan int)
	go func() {
		n := 0
		defer func() { sampled <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := s.Balance(bg, a)
			if err != nil || b.Available < 0 || b.Balance < 0 {
				negative.Add(1)
			}
			n++
		}
	}()

	var ok, refused, settledEarly atomic.Int64
	var mu sync.Mutex
	var later []string
	var wg sync.WaitGroup
	errs := make(chan error, attempts)
	for i := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rid := fmt.Sprint("req-", i)
			r, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: rid, Tool: "t"})
			switch {
			case errors.Is(err, ledger.ErrInsufficientCredits):
				refused.Add(1)
				return
			case err != nil:
				errs <- err
				return
			}
			ok.Add(1)
			if r.Available < 0 {
				negative.Add(1)
			}
			if i%3 == 0 {
				if _, err := s.Settle(bg, a, rid); err != nil {
					errs <- err
				}
				settledEarly.Add(1)
				return
			}
			mu.Lock()
			later = append(later, rid)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ok.Load() != credits || refused.Load() != attempts-credits {
		t.Fatalf("%d holds succeeded and %d were refused, want %d and %d", ok.Load(), refused.Load(), credits, attempts-credits)
	}
	if b := MustBalance(t, s, a); b.Available != 0 || b.Balance != credits-settledEarly.Load() {
		t.Fatalf("after the race: %+v (%d settled)", b, settledEarly.Load())
	}

	// Resolve the rest concurrently: even ones settle, odd ones void.
	var settled atomic.Int64
	settled.Store(settledEarly.Load())
	errs = make(chan error, len(later))
	for i, rid := range later {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				_, err = s.Settle(bg, a, rid)
				settled.Add(1)
			} else {
				_, err = s.Void(bg, a, rid, "client_gone")
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(stop)
	samples := <-sampled
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if negative.Load() != 0 {
		t.Fatalf("available went below zero %d times", negative.Load())
	}
	want := credits - settled.Load()
	if b := MustBalance(t, s, a); b.Balance != want || b.Available != want {
		t.Fatalf("final %+v, want %d", b, want)
	}
	r := VerifyClean(t, s)
	t.Logf("%d balance samples; %d settled; verify saw %d entries", samples, settled.Load(), r.Entries)
	if r.Entries != 1+credits+credits {
		t.Fatalf("%d entries, want %d", r.Entries, 1+2*credits)
	}
}

// Many accounts at once: the group committer must keep every account's order.
func testConcurrentAccounts(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	const accounts, perAccount = 16, 100
	ids := make([]string, accounts)
	for i := range ids {
		ids[i] = MustAccount(t, s, fmt.Sprintf("m%d@example.com", i)).ID
		MustGrant(t, s, ids[i], ledger.Live, perAccount/2)
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range perAccount / 4 {
					rid := fmt.Sprintf("w%d-%d", w, j)
					if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: id, Mode: ledger.Live, RequestID: rid}); err != nil {
						if !errors.Is(err, ledger.ErrInsufficientCredits) {
							t.Error(err)
						}
						continue
					}
					if j%2 == 0 {
						s.Settle(bg, id, rid)
					} else {
						s.Void(bg, id, rid, "")
					}
					if j%10 == 0 {
						s.Grant(bg, ledger.GrantRequest{AccountID: id, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1, Reference: rid})
					}
				}
			}()
		}
	}
	wg.Wait()
	VerifyClean(t, s)
}

// testConcurrentReplays: a payment provider that delivers the same event several times at once
// (or a client that retries with the same Idempotency-Key before the first answer) gets one
// effect. On a synced store the first call's commit is still in flight when the others arrive,
// so the store must stop them before the first one is durable (Badger: by its in-memory record
// of the reference or key).
func testConcurrentReplays(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "replay@example.com").ID
	const n = 16
	var wg sync.WaitGroup
	var credited, isNew atomic.Int64
	for range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			r, err := s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10, Reference: "pi_1"})
			if err != nil {
				t.Error(err)
				return
			}
			if !r.Repeated {
				credited.Add(1)
			}
		}()
		go func() {
			defer wg.Done()
			_, fresh, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "order-1", RequestID: fmt.Sprint("req_", credited.Load()), Fingerprint: "fp"})
			if err != nil {
				t.Error(err)
				return
			}
			if fresh {
				isNew.Add(1)
			}
		}()
	}
	wg.Wait()
	if credited.Load() != 1 || isNew.Load() != 1 {
		t.Fatalf("%d calls: %d grants credited and %d requests began, want 1 and 1", n, credited.Load(), isNew.Load())
	}
	if b := MustBalance(t, s, a); b.Balance != 10 {
		t.Fatalf("balance %+v, want 10", b)
	}
	VerifyClean(t, s)
}
