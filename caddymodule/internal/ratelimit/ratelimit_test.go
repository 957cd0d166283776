package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

var (
	t0  = time.Unix(1_000_000, 0)
	ctx = context.Background()
)

// TestForgetsRefilledBuckets: a bucket that has refilled is the same as none, so the next use
// of its shard after a sweep interval drops it; memory follows the identities in use.
func TestForgetsRefilledBuckets(t *testing.T) {
	b := New(Limit{Requests: 60, Window: time.Minute, Burst: 60}, 0)
	for i := 0; i < 1000; i++ {
		b.Take(ctx, "client-"+strconv.Itoa(i), t0)
	}
	if n := b.Len(); n != 1000 {
		t.Fatalf("%d buckets", n)
	}
	t1 := t0.Add(time.Minute + time.Second)
	for i := 0; i < 1000; i++ {
		b.Take(ctx, "later-"+strconv.Itoa(i), t1)
	}
	if n := b.Len(); n != 1000 {
		t.Errorf("%d buckets, want only the 1000 new ones: the refilled ones must go", n)
	}
}

// TestBoundedEntries: a flood of identities never holds more buckets than the cap.
func TestBoundedEntries(t *testing.T) {
	b := New(Limit{Requests: 2, Window: time.Minute, Burst: 2}, 3*shards)
	for i := 0; i < 10_000; i++ {
		b.Take(ctx, "flood-"+strconv.Itoa(i), t0)
	}
	if n := b.Len(); n > 3*shards {
		t.Fatalf("%d buckets, cap %d", n, 3*shards)
	}
}

// TestTakeRefundReset: a burst of Burst, then refusals with the wait until the next request;
// a refund gives a request back; after one interval one more is allowed; Reset fills the bucket.
func TestTakeRefundReset(t *testing.T) {
	b := New(Limit{Requests: 1, Window: 15 * time.Minute, Burst: 5}, 0)
	var last Taken
	for i := range 5 {
		tk, ok, _ := b.Take(ctx, "x", t0)
		if !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
		last = tk
	}
	if _, ok, wait := b.Take(ctx, "x", t0); ok || wait != 15*time.Minute {
		t.Fatalf("sixth request: ok %v, wait %v; want refused for 15m", ok, wait)
	}
	if blocked, wait := b.Blocked(ctx, "x", t0); !blocked || wait != 15*time.Minute {
		t.Fatalf("Blocked: %v %v", blocked, wait)
	}
	last.Refund(ctx)
	if _, ok, _ := b.Take(ctx, "x", t0); !ok {
		t.Fatal("a refunded request still counts")
	}
	if _, ok, _ := b.Take(ctx, "x", t0); ok {
		t.Fatal("more than the burst after a refund")
	}
	t1 := t0.Add(15*time.Minute + time.Second)
	if _, ok, _ := b.Take(ctx, "x", t1); !ok {
		t.Fatal("still refused one interval later")
	}
	if _, ok, _ := b.Take(ctx, "x", t1); ok {
		t.Fatal("two requests restored after one interval")
	}
	b.Reset(ctx, "x")
	for i := range 5 {
		if _, ok, _ := b.Take(ctx, "x", t1); !ok {
			t.Fatalf("request %d after Reset refused", i+1)
		}
	}
	if blocked, _ := b.Blocked(ctx, "nobody", t0); blocked {
		t.Fatal("an unknown identity is blocked")
	}
}

// TestTakeConcurrent: requests sent all at once get exactly the burst.
func TestTakeConcurrent(t *testing.T) {
	b := New(Limit{Requests: 5, Window: time.Hour, Burst: 5}, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, ok, _ := b.Take(ctx, "burst", t0); ok {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if allowed != 5 {
		t.Fatalf("%d of 200 allowed, want 5", allowed)
	}
}

// TestTakeAllIsAllOrNothing: when one bucket refuses, the others are not charged; the wait is
// the longest; states report what is left.
func TestTakeAllIsAllOrNothing(t *testing.T) {
	key := New(Limit{Requests: 60, Window: time.Minute, Burst: 20}, 0)
	acct := New(Limit{Requests: 2, Window: time.Minute, Burst: 2}, 0)
	reqs := []Request{{Buckets: key, ID: "k"}, {Buckets: acct, ID: "a"}}
	states := make([]State, 2)
	for i := range 2 {
		if d, _ := TakeAll(ctx, t0, reqs, states); d != -1 {
			t.Fatalf("request %d denied by %d", i+1, d)
		}
	}
	if states[0].Remaining != 18 || states[1].Remaining != 0 {
		t.Fatalf("states %+v", states)
	}
	if states[1].Reset != 30*time.Second {
		t.Fatalf("account reset %v, want 30s", states[1].Reset)
	}
	d, wait := TakeAll(ctx, t0, reqs, states)
	if d != 1 || wait != 30*time.Second {
		t.Fatalf("denied %d wait %v, want the account for 30s", d, wait)
	}
	// The refused request did not use up the key's bucket.
	if d, _ := TakeAll(ctx, t0, reqs[:1], states[:1]); d != -1 || states[0].Remaining != 17 {
		t.Fatalf("key after a refused request: denied %d, %+v; want 17 left", d, states[0])
	}
}

func TestLimitCheck(t *testing.T) {
	for _, l := range []Limit{{0, time.Minute, 1}, {1, 0, 1}, {1, time.Minute, 0}} {
		if l.Check() == nil {
			t.Errorf("%+v accepted", l)
		}
	}
	if err := (Limit{5, time.Minute, 5}).Check(); err != nil {
		t.Error(err)
	}
	if e := (Limit{4, time.Minute, 4}).Every(); e != 15*time.Second {
		t.Errorf("Every %v", e)
	}
}
