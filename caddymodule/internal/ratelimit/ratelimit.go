// Package ratelimit is the one request limiter of caddy-textgen: token buckets, one per
// identity (an API key, an account, a client address, an email), and counted places (Slots: the
// generations an account runs at once, the requests a model host runs). The API's rate limits,
// its limit on failed authentications, its concurrency caps and My Account's log-in and sign-up
// throttles all use it.
//
// The buckets live in this process's memory (x/time/rate, in separately locked shards) or, when
// several instances must share them, in Redis (Shared: GCRA, the token bucket's arithmetic on
// one stored time, as github.com/go-redis/redis_rate keeps it). While Redis cannot answer, every
// call falls back to this process's memory and Redis is probed in the background until it
// answers again; no call waits longer than the store's timeout.
package ratelimit

import (
	"context"
	"fmt"
	"math"
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

// Buckets holds the token buckets of one Limit, one per identity: in Redis when it has a Shared
// store that answers, else in this process's memory.
type Buckets struct {
	limit  Limit
	mem    *memory
	shared *Shared // nil: memory only
	prefix string  // Redis key prefix of this limit
}

// New returns empty buckets for l in this process's memory (every identity starts with a full
// bucket). maxEntries bounds how many identities are remembered at once; 0 means
// DefaultMaxEntries.
func New(l Limit, maxEntries int) *Buckets {
	return &Buckets{limit: l, mem: newMemory(l, maxEntries)}
}

// NewShared returns buckets for l kept in s (nil: in memory, as New), under name: the buckets of
// every instance that uses the same name and limit on the same Redis are the same buckets. A
// changed limit starts afresh (its parameters are part of the key). maxEntries bounds the
// fallback's memory, as for New.
func NewShared(s *Shared, name string, l Limit, maxEntries int) *Buckets {
	b := New(l, maxEntries)
	if s != nil {
		b.shared = s
		b.prefix = s.keyPrefix("rl", fmt.Sprintf("%s|%d/%d/%d", name, l.Requests, l.Window, l.Burst))
	}
	return b
}

// Limit is the limit the buckets enforce.
func (b *Buckets) Limit() Limit { return b.limit }

// Len is the number of buckets held in this process's memory.
func (b *Buckets) Len() int { return b.mem.len() }

// Shared is the Redis store of the buckets; nil when they are in memory only.
func (b *Buckets) Shared() *Shared { return b.shared }

// useRedis tells whether a call should go to Redis now.
func (b *Buckets) useRedis() bool { return b.shared != nil && b.shared.Up() }

// Blocked reports whether id has no request left at t, and how long until it has one. It
// charges nothing.
func (b *Buckets) Blocked(ctx context.Context, id string, t time.Time) (bool, time.Duration) {
	if b.useRedis() {
		blocked, wait, err := b.shared.blocked(ctx, b.key(id), b.limit)
		if err == nil {
			return blocked, wait
		}
		b.shared.failed(ctx, err)
	}
	b.shared.fellBack()
	return b.mem.blocked(id, t)
}

// Charge counts one request of id at t if it has one left (a failure that has happened
// already: past the limit it changes nothing, and the identity stays blocked).
func (b *Buckets) Charge(ctx context.Context, id string, t time.Time) {
	if b.useRedis() {
		err := b.shared.charge(ctx, b.key(id), b.limit)
		if err == nil {
			return
		}
		b.shared.failed(ctx, err)
	}
	b.shared.fellBack()
	b.mem.charge(id, t)
}

// Reset forgets id: its bucket is full again (in Redis and in this process's memory).
func (b *Buckets) Reset(ctx context.Context, id string) {
	b.mem.reset(id)
	if b.useRedis() {
		if err := b.shared.reset(ctx, b.key(id)); err != nil {
			b.shared.failed(ctx, err)
		}
	}
}

// Taken is a request counted by Take; Refund gives it back.
type Taken struct {
	b     *Buckets
	id    string
	res   *rate.Reservation // counted in memory
	redis string            // counted in Redis under this key
	t     time.Time
}

// Refund gives back the request, as far as later requests of the same identity allow: a
// refund never lets more through than the limit.
func (tk Taken) Refund(ctx context.Context) {
	switch {
	case tk.res != nil:
		tk.b.mem.refund(tk.id, tk.res, tk.t)
	case tk.redis != "":
		if err := tk.b.shared.refund(ctx, tk.redis, tk.b.limit); err != nil {
			tk.b.shared.failed(ctx, err)
		}
	}
}

// Take counts one request of id at t if id has one left; else it counts nothing and reports
// how long until it has one. Checking and counting are one step, so requests sent all at once
// are limited like requests sent one by one.
func (b *Buckets) Take(ctx context.Context, id string, t time.Time) (tk Taken, ok bool, wait time.Duration) {
	if b.useRedis() {
		key := b.key(id)
		ok, wait, err := b.shared.take(ctx, key, b.limit)
		if err == nil {
			if !ok {
				return Taken{}, false, wait
			}
			return Taken{b: b, id: id, redis: key}, true, 0
		}
		b.shared.failed(ctx, err)
	}
	b.shared.fellBack()
	res, ok, wait := b.mem.take(id, t)
	if !ok {
		return Taken{}, false, wait
	}
	return Taken{b: b, id: id, res: res, t: t}, true, 0
}

// Request is one charge of TakeAll: one request of ID against Buckets.
type Request struct {
	Buckets *Buckets
	ID      string
}

// State is a bucket's state after a request, for the RateLimit response headers.
type State struct {
	Remaining int           // whole requests left now
	Reset     time.Duration // until the next request is restored
}

// stateOf is the State of a bucket of l holding tokens after a request.
func stateOf(l Limit, tokens float64) State {
	st := State{Remaining: int(tokens)}
	if tokens >= float64(l.Burst) {
		st.Reset = l.Every()
	} else {
		st.Reset = untilTokens(l.rate(), tokens, math.Floor(tokens)+1)
	}
	return st
}

// MaxTakeAll is the most buckets Admit counts a request against at once.
const MaxTakeAll = 4

// Place asks Admit for one of Max places of ID in Slots as well (a concurrent generation).
type Place struct {
	Slots *Slots
	ID    string
	Max   int
}

// Admit counts one request against each of reqs (at most MaxTakeAll) and, with place, takes one
// of its places: all or none. If a bucket is empty, nothing is counted and denied is the index
// of the one that refuses longest, with the wait; if the buckets allow but the places are all
// taken, denied is len(reqs). Else denied is -1, states[i] is filled in for each bucket, and slot
// is the place taken (release it when the request ends). With Redis it is one round trip (one
// script), so instances sharing the limits never let more through together than the limits.
// The buckets and the place must use the same store (one Shared or none).
func Admit(ctx context.Context, t time.Time, reqs []Request, place *Place, states []State) (denied int, wait time.Duration, slot Slot) {
	if len(reqs) > MaxTakeAll {
		panic("ratelimit: Admit of more than MaxTakeAll requests")
	}
	var s *Shared
	switch {
	case len(reqs) > 0:
		s = reqs[0].Buckets.shared
	case place != nil:
		s = place.Slots.shared
	default:
		return -1, 0, Slot{}
	}
	if s != nil && s.Up() {
		var key, member string
		if place != nil {
			key, member = place.Slots.redisPlace(place.ID)
		}
		denied, wait, err := s.admit(ctx, reqs, place, key, member, states)
		if err == nil {
			if denied == -1 && place != nil {
				slot = place.Slots.held(place.ID, key, member)
			}
			return denied, wait, slot
		}
		s.failed(ctx, err)
	}
	s.fellBack()
	var takePlace func() bool
	if place != nil {
		takePlace = func() bool {
			var ok bool
			slot, ok = place.Slots.acquireMemory(place.ID, place.Max)
			return ok
		}
	}
	if denied, wait = takeAllMemory(t, reqs, states, takePlace); denied >= 0 {
		return denied, wait, Slot{}
	}
	return -1, 0, slot
}

// TakeAll is Admit without a place.
func TakeAll(ctx context.Context, t time.Time, reqs []Request, states []State) (denied int, wait time.Duration) {
	denied, wait, _ = Admit(ctx, t, reqs, nil, states)
	return denied, wait
}
