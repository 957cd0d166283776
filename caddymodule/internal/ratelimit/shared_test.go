package ratelimit

// The buckets and places in a real redis-server (redistest: a free port, no persistence). Two
// Shared stores on one Redis stand for two instances.

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/redistest"
)

// twoStores opens two stores on one Redis, as two instances would.
func twoStores(t *testing.T, srv *redistest.Server) (*Shared, *Shared) {
	t.Helper()
	open := func() *Shared {
		s, err := OpenShared(srv.URL(0), SharedOptions{ProbeEvery: 20 * time.Millisecond, HeartbeatEvery: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return open(), open()
}

// TestSharedTakeAllAcrossInstances: 200 requests at once, half through each instance, against
// a key limit of 20 (burst 20) and an account limit of 30: exactly 20 pass in total, and a
// refused request uses up nothing (the account's bucket shows only the 20).
func TestSharedTakeAllAcrossInstances(t *testing.T) {
	srv := redistest.New(t)
	a, b := twoStores(t, srv)
	keyL := Limit{Requests: 20, Window: time.Minute, Burst: 20}
	acctL := Limit{Requests: 30, Window: time.Minute, Burst: 30}
	inst := [2][2]*Buckets{
		{NewShared(a, "ledger|key", keyL, 0), NewShared(a, "ledger|account", acctL, 0)},
		{NewShared(b, "ledger|key", keyL, 0), NewShared(b, "ledger|account", acctL, 0)},
	}
	var allowed, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bk := inst[i%2]
			states := make([]State, 2)
			d, wait := TakeAll(ctx, t0, []Request{{Buckets: bk[0], ID: "k1"}, {Buckets: bk[1], ID: "acct1"}}, states)
			switch {
			case d == -1:
				allowed.Add(1)
			case d == 0 && wait > 0:
				refused.Add(1)
			default:
				t.Errorf("denied by %d after %v", d, wait)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 20 || refused.Load() != 180 {
		t.Fatalf("%d allowed, %d refused; want exactly 20 of 200 across both instances", allowed.Load(), refused.Load())
	}
	if a.Fallbacks()+b.Fallbacks() != 0 {
		t.Fatal("fell back to memory with Redis up")
	}
	// The account was charged only for the 20 that passed: 10 left, through either instance.
	states := make([]State, 1)
	if d, _ := TakeAll(ctx, t0, []Request{{Buckets: inst[1][1], ID: "acct1"}}, states); d != -1 || states[0].Remaining != 9 {
		t.Fatalf("account after the burst: denied %d, %+v; want 9 left after this one", d, states[0])
	}
	if states[0].Reset <= 0 || states[0].Reset > 2*time.Second {
		t.Fatalf("reset %v: one request of 30/min comes back every 2s", states[0].Reset)
	}
}

// TestSharedSingleBuckets: Take, Refund, Blocked and Reset on one identity, through two
// instances.
func TestSharedSingleBuckets(t *testing.T) {
	srv := redistest.New(t)
	a, b := twoStores(t, srv)
	l := Limit{Requests: 1, Window: 15 * time.Minute, Burst: 3}
	ba, bb := NewShared(a, "login", l, 0), NewShared(b, "login", l, 0)
	var last Taken
	for i := range 3 {
		tk, ok, _ := []*Buckets{ba, bb}[i%2].Take(ctx, "x", t0)
		if !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
		last = tk
	}
	if _, ok, wait := ba.Take(ctx, "x", t0); ok || wait <= 14*time.Minute || wait > 15*time.Minute {
		t.Fatalf("fourth request: ok %v, wait %v; want refused for about 15m", ok, wait)
	}
	if blocked, wait := bb.Blocked(ctx, "x", t0); !blocked || wait <= 14*time.Minute || wait > 15*time.Minute {
		t.Fatalf("Blocked: %v %v", blocked, wait)
	}
	last.Refund(ctx)
	if blocked, _ := ba.Blocked(ctx, "x", t0); blocked {
		t.Fatal("blocked after a refund")
	}
	if _, ok, _ := bb.Take(ctx, "x", t0); !ok {
		t.Fatal("a refunded request still counts")
	}
	bb.Take(ctx, "x", t0) // past the limit: changes nothing
	if blocked, _ := ba.Blocked(ctx, "x", t0); !blocked {
		t.Fatal("not blocked at the limit")
	}
	ba.Reset(ctx, "x")
	if blocked, _ := bb.Blocked(ctx, "x", t0); blocked {
		t.Fatal("blocked after Reset")
	}
	for range 3 {
		ba.Take(ctx, "y", t0)
	}
	if blocked, _ := bb.Blocked(ctx, "y", t0); !blocked {
		t.Fatal("three charges through one instance do not block the other")
	}
	if blocked, _ := bb.Blocked(ctx, "nobody", t0); blocked {
		t.Fatal("an unknown identity is blocked")
	}
	// No identity in clear in Redis.
	keys, err := srv.Client(t).Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if len(k) > 0 && (contains(k, ":x") || contains(k, ":y")) {
			t.Fatalf("key %q names the identity", k)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestSharedFallsBackAndRecovers: with Redis stopped, calls are answered from memory (counted
// as fallbacks, the store reports down), each of the two instances under its share of the
// limit, so that together they allow no more than it; with Redis back, the store comes back by
// itself and the buckets are shared again.
func TestSharedFallsBackAndRecovers(t *testing.T) {
	srv := redistest.New(t)
	a, b := twoStores(t, srv)
	waitFor(t, "the two instances to count each other", func() bool { return a.Instances() == 2 && b.Instances() == 2 })
	l := Limit{Requests: 5, Window: time.Hour, Burst: 5}
	ba, bb := NewShared(a, "k", l, 0), NewShared(b, "k", l, 0)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	var allowed [2]int
	for i := range 20 {
		if _, ok, _ := []*Buckets{ba, bb}[i%2].Take(ctx, "id", t0); ok {
			allowed[i%2]++
		}
	}
	// Each allows its share, 5/2 rounded down: 4 in all, not 10.
	if allowed != [2]int{2, 2} || a.Up() || a.Fallbacks() < 10 {
		t.Fatalf("Redis down: %v of 10 each allowed (want 2 each, in memory), up %v, fallbacks %d", allowed, a.Up(), a.Fallbacks())
	}
	// The headers' figures count whole requests of the share.
	var st [1]State
	if denied, _ := TakeAll(ctx, t0.Add(time.Hour), []Request{{Buckets: ba, ID: "fresh"}}, st[:]); denied != -1 || st[0].Remaining != 1 {
		t.Fatalf("a fresh identity's first request in memory: denied %d, %+v; want allowed with 1 left of its share of 2", denied, st[0])
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the store to come back", func() bool { return a.Up() })
	before := a.Fallbacks()
	n := 0
	for i := range 10 {
		if _, ok, _ := []*Buckets{ba, bb}[i%2].Take(ctx, "id", t0); ok {
			n++
		}
	}
	if a.Fallbacks() != before {
		t.Fatal("still falling back after Redis is back")
	}
	// b never saw Redis fail: its first call after the restart may fail once on a closed pooled
	// connection (retried), never more than the limit in total.
	if n != 5 {
		t.Fatalf("Redis back: %d of 10 allowed across both, want 5", n)
	}
}

// TestSharedFrozenRedisTimesOut: a Redis that accepts connections and never answers costs a
// call at most the timeout; the store falls back, then recovers when Redis answers.
func TestSharedFrozenRedisTimesOut(t *testing.T) {
	srv := redistest.New(t)
	s, err := OpenShared(srv.URL(0), SharedOptions{Timeout: 50 * time.Millisecond, ProbeEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bk := NewShared(s, "k", Limit{Requests: 5, Window: time.Hour, Burst: 5}, 0)
	if _, ok, _ := bk.Take(ctx, "id", t0); !ok || s.Fallbacks() != 0 {
		t.Fatal("first take")
	}
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	// One slow call falls back alone; downAfter in a row mark the store down.
	done := make(chan bool)
	go func() {
		for range downAfter {
			_, ok, _ := bk.Take(ctx, "id", t0)
			done <- ok
		}
	}()
	for i := range downAfter {
		select {
		case ok := <-done:
			if !ok || s.Fallbacks() != uint64(i+1) || s.Up() != (i+1 < downAfter) {
				t.Fatalf("frozen Redis, call %d: ok %v, up %v, fallbacks %d", i+1, ok, s.Up(), s.Fallbacks())
			}
		case <-time.After(time.Minute): // a hang, not a speed check
			t.Fatal("a call to a frozen Redis never returned")
		}
	}
	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the store to come back", func() bool { return s.Up() })
}

// TestSlotsAcrossInstances: a cap of 4 places holds across two instances; a released place is
// free at once; the places of an instance that stops renewing (died) come back after the expiry,
// while those of a live instance are renewed past it.
func TestSlotsAcrossInstances(t *testing.T) {
	srv := redistest.New(t)
	a, b := twoStores(t, srv)
	const expiry = 300 * time.Millisecond
	sa, sb := NewSlots(a, "acct", expiry), NewSlots(b, "acct", expiry)
	defer sb.Close()
	var got []Slot
	for i := range 10 {
		if sl, ok := []*Slots{sa, sb}[i%2].Acquire(ctx, "acct1", 4); ok {
			got = append(got, sl)
		}
	}
	if len(got) != 4 || sb.Running(ctx, "acct1") != 4 {
		t.Fatalf("%d places taken (running %d), want 4 across both", len(got), sb.Running(ctx, "acct1"))
	}
	got[1].Release() // one of b's: given back in the background, soon
	waitFor(t, "the released place", func() bool { return sb.Running(ctx, "acct1") == 3 })
	if _, ok := sb.Acquire(ctx, "acct1", 4); !ok {
		t.Fatal("a released place is not free")
	}
	// a dies holding two places: nothing renews them.
	sa.Close()
	waitFor(t, "the dead instance's places to expire", func() bool { return sb.Running(ctx, "acct1") == 2 })
	// b's two places outlive many expiries: they are renewed. Redis holds each place with its
	// deadline as its score, which only a renewal moves: wait until both have been renewed to
	// three expiries past the deadlines they have now (Redis's clock, not a fixed sleep here).
	key := sb.prefix + hashID("acct1")
	deadlines := func() (bs []float64) { // of b's places
		zs, err := sb.shared.rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, z := range zs {
			if m, _ := z.Member.(string); strings.HasPrefix(m, sb.owner+":") {
				bs = append(bs, z.Score)
			}
		}
		return bs
	}
	first := deadlines()
	if len(first) != 2 {
		t.Fatalf("b holds %d places in Redis, want 2", len(first))
	}
	waitFor(t, "b's places to be renewed through three expiries", func() bool {
		ds := deadlines()
		for _, d := range ds {
			if d < max(first[0], first[1])+float64(3*expiry.Milliseconds()) {
				return false
			}
		}
		return len(ds) == 2
	})
	if n := sb.Running(ctx, "acct1"); n != 2 {
		t.Fatalf("running %d after several expiries, want b's 2 still held", n)
	}
	if _, ok := sb.Acquire(ctx, "acct1", 3); !ok {
		t.Fatal("no place after the dead instance's expired")
	}
	if _, ok := sb.Acquire(ctx, "acct1", 3); ok {
		t.Fatal("more than the cap")
	}
}

// TestSlotsFallBack: with Redis down, places are counted in memory, each of the two instances
// holding its share of the cap (4 places: 2 each), and released there; a cap smaller than the
// instances still leaves each one place.
func TestSlotsFallBack(t *testing.T) {
	srv := redistest.New(t)
	a, b := twoStores(t, srv)
	waitFor(t, "the two instances to count each other", func() bool { return a.Instances() == 2 && b.Instances() == 2 })
	sa, sb := NewSlots(a, "acct", time.Second), NewSlots(b, "acct", time.Second)
	defer sa.Close()
	defer sb.Close()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	var got [2][]Slot
	for i := range 10 {
		if sl, ok := []*Slots{sa, sb}[i%2].Acquire(ctx, "x", 4); ok {
			got[i%2] = append(got[i%2], sl)
		}
	}
	if len(got[0]) != 2 || len(got[1]) != 2 || a.Up() {
		t.Fatalf("places in memory %d and %d (up %v), want 2 each of 4", len(got[0]), len(got[1]), a.Up())
	}
	got[0][0].Release()
	if _, ok := sa.Acquire(ctx, "x", 4); !ok {
		t.Fatal("a place released in memory is not free")
	}
	if _, ok := sa.Acquire(ctx, "y", 1); !ok {
		t.Fatal("a cap of 1 with two instances leaves this one no place")
	}
}

// TestInstancesCounted: stores on one Redis count each other by their heartbeats, a closed one
// stops being counted at once, and the count is kept while Redis is down.
func TestInstancesCounted(t *testing.T) {
	srv := redistest.New(t)
	a, b := twoStores(t, srv)
	c, _ := twoStores(t, srv)
	waitFor(t, "four instances to count each other", func() bool {
		return a.Instances() == 4 && b.Instances() == 4 && c.Instances() == 4
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the others to count one fewer", func() bool { return a.Instances() == 3 && b.Instances() == 3 })
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	bk := NewShared(a, "k", Limit{Requests: 1, Window: time.Hour, Burst: 1}, 0)
	bk.Take(ctx, "id", t0) // a call that fails: the store goes down
	waitFor(t, "the store to be down", func() bool {
		bk.Take(ctx, "id", t0)
		return !a.Up()
	})
	if a.Instances() != 3 {
		t.Fatalf("while Redis is down the store counts %d instances, want the 3 it last saw", a.Instances())
	}
	var nilStore *Shared
	if nilStore.Instances() != 1 {
		t.Fatal("memory only counts more than itself")
	}
}

// waitFor polls cond until it holds (a hang fails after a minute: not a speed check).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var _ = context.Background
