// Package ratelimit is the one request limiter of caddy-textgen: token buckets (x/time/rate),
// one per identity (an API key, an account, a client address, an email), kept in memory in
// separately locked shards. The API's rate limits, its limit on failed authentications, and My
// Account's log-in and sign-up throttles all use it.
package ratelimit

import (
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limit is a token bucket: Requests per Window on average, at most Burst at once.
type Limit struct {
	Requests int
	Window   time.Duration
	Burst    int
}

// Check reports a limit that cannot work.
func (l Limit) Check() error {
	switch {
	case l.Requests <= 0:
		return fmt.Errorf("requests must be at least 1")
	case l.Window <= 0:
		return fmt.Errorf("the window must be positive")
	case l.Burst <= 0:
		return fmt.Errorf("burst must be at least 1")
	}
	return nil
}

// Every is the time in which one request is restored.
func (l Limit) Every() time.Duration { return l.Window / time.Duration(l.Requests) }

func (l Limit) rate() rate.Limit {
	return rate.Limit(float64(l.Requests) / l.Window.Seconds())
}

// shards spreads the buckets over separately locked maps, so concurrent requests of different
// identities do not wait for each other.
const shards = 32

// DefaultMaxEntries bounds the buckets of one Buckets. Idle buckets are dropped anyway (a bucket
// that has refilled is the same as a new one); the cap only matters under a flood of distinct
// identities (client addresses), when a random bucket makes room for a new one.
const DefaultMaxEntries = 1 << 20

// sweepEvery is how often a shard drops its refilled buckets.
const sweepEvery = time.Minute

// Buckets holds the token buckets of one Limit, one per identity.
type Buckets struct {
	limit      Limit
	r          rate.Limit
	maxEntries int
	seed       maphash.Seed
	shards     [shards]shard
}

type shard struct {
	mu        sync.Mutex
	m         map[string]*rate.Limiter
	lastSweep time.Time
}

// New returns empty buckets for l (every identity starts with a full bucket). maxEntries bounds
// how many identities are remembered at once; 0 means DefaultMaxEntries.
func New(l Limit, maxEntries int) *Buckets {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	b := &Buckets{limit: l, r: l.rate(), maxEntries: maxEntries, seed: maphash.MakeSeed()}
	for i := range b.shards {
		b.shards[i].m = make(map[string]*rate.Limiter)
	}
	return b
}

// Limit is the limit the buckets enforce.
func (b *Buckets) Limit() Limit { return b.limit }

func (b *Buckets) shard(id string) *shard {
	return &b.shards[maphash.String(b.seed, id)%shards]
}

// get returns the bucket of id, creating a full one. Called with sh.mu held.
func (b *Buckets) get(sh *shard, id string, t time.Time) *rate.Limiter {
	if t.Sub(sh.lastSweep) >= sweepEvery {
		sh.lastSweep = t
		for k, lim := range sh.m {
			if lim.TokensAt(t) >= float64(b.limit.Burst) {
				delete(sh.m, k)
			}
		}
	}
	lim := sh.m[id]
	if lim == nil {
		per := b.maxEntries / shards
		if per < 1 {
			per = 1
		}
		for k := range sh.m { // full: drop one (map order is random)
			if len(sh.m) < per {
				break
			}
			delete(sh.m, k)
		}
		lim = rate.NewLimiter(b.r, b.limit.Burst)
		sh.m[id] = lim
	}
	return lim
}

// Len is the number of buckets held.
func (b *Buckets) Len() int {
	n := 0
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Blocked reports whether id has no request left at t, and how long until it has one. It
// charges nothing.
func (b *Buckets) Blocked(id string, t time.Time) (bool, time.Duration) {
	sh := b.shard(id)
	sh.mu.Lock()
	lim := sh.m[id]
	var tokens float64
	if lim != nil {
		tokens = lim.TokensAt(t)
	}
	sh.mu.Unlock()
	if lim == nil || tokens >= 1 {
		return false, 0
	}
	return true, untilTokens(b.r, tokens, 1)
}

// Charge counts one request of id at t whether or not it has one left (a failure that has
// happened already).
func (b *Buckets) Charge(id string, t time.Time) {
	sh := b.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b.get(sh, id, t).AllowN(t, 1)
}

// Reset forgets id: its bucket is full again.
func (b *Buckets) Reset(id string) {
	sh := b.shard(id)
	sh.mu.Lock()
	delete(sh.m, id)
	sh.mu.Unlock()
}

// Taken is a request counted by Take; Refund gives it back.
type Taken struct {
	b   *Buckets
	id  string
	res *rate.Reservation
	t   time.Time
}

// Refund gives back the request, as far as later requests of the same identity allow
// (x/time/rate's CancelAt): a refund never lets more through than the limit.
func (tk Taken) Refund() {
	if tk.res == nil {
		return
	}
	sh := tk.b.shard(tk.id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tk.res.CancelAt(tk.t)
}

// Take counts one request of id at t if id has one left; else it counts nothing and reports
// how long until it has one. Checking and counting are one step, so requests sent all at once
// are limited like requests sent one by one.
func (b *Buckets) Take(id string, t time.Time) (tk Taken, ok bool, wait time.Duration) {
	sh := b.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	res := b.get(sh, id, t).ReserveN(t, 1)
	if d := res.DelayFrom(t); d > 0 {
		res.CancelAt(t)
		return Taken{}, false, d
	}
	return Taken{b: b, id: id, res: res, t: t}, true, 0
}

// Charge of TakeAll: one request of ID against Buckets.
type Request struct {
	Buckets *Buckets
	ID      string
}

// State is a bucket's state after a request, for the RateLimit response headers.
type State struct {
	Remaining int           // whole requests left now
	Reset     time.Duration // until the next request is restored
}

// MaxTakeAll is the most requests TakeAll counts at once.
const MaxTakeAll = 4

// TakeAll counts one request against each of reqs (at most MaxTakeAll), all or none: if any
// bucket is empty, nothing is counted and denied is the index of the one that refuses longest,
// with the wait; else denied is -1 and states[i] is filled in for each.
func TakeAll(t time.Time, reqs []Request, states []State) (denied int, wait time.Duration) {
	var (
		lims [MaxTakeAll]*rate.Limiter
		resv [MaxTakeAll]*rate.Reservation
	)
	if len(reqs) > MaxTakeAll {
		panic("ratelimit: TakeAll of more than MaxTakeAll requests")
	}
	denied = -1
	for i, rq := range reqs {
		sh := rq.Buckets.shard(rq.ID)
		sh.mu.Lock()
		lims[i] = rq.Buckets.get(sh, rq.ID, t)
		resv[i] = lims[i].ReserveN(t, 1)
		sh.mu.Unlock()
		if d := resv[i].DelayFrom(t); d > 0 && d > wait {
			denied, wait = i, d
		}
	}
	if denied >= 0 {
		for i, rq := range reqs {
			sh := rq.Buckets.shard(rq.ID)
			sh.mu.Lock()
			resv[i].CancelAt(t)
			sh.mu.Unlock()
		}
		return denied, wait
	}
	for i, rq := range reqs {
		tokens := math.Max(0, lims[i].TokensAt(t))
		st := State{Remaining: int(tokens)}
		if tokens >= float64(rq.Buckets.limit.Burst) {
			st.Reset = time.Duration(float64(time.Second) / float64(lims[i].Limit()))
		} else {
			st.Reset = untilTokens(lims[i].Limit(), tokens, math.Floor(tokens)+1)
		}
		states[i] = st
	}
	return -1, 0
}

// untilTokens is how long a bucket refilling at r takes from tokens to want.
func untilTokens(r rate.Limit, tokens, want float64) time.Duration {
	return time.Duration((want - tokens) / float64(r) * float64(time.Second))
}
