// Package ratelimit is the one request limiter of caddy-textgen: token buckets, one per
// identity (an API key, an account, a client address, an email), and counted places (Slots: the
// generations an account runs at once, the requests a model host runs). The API's rate limits,
// its limit on failed authentications, its concurrency caps and My Account's log-in and sign-up
// throttles all use it.
//
// The buckets live in this process's memory (x/time/rate, in separately locked shards) or, when
// several instances must share them, in Redis (Shared: GCRA, the token bucket's arithmetic on
// one stored time, as github.com/go-redis/redis_rate keeps it). While Redis cannot answer, every
// call falls back to this process's memory, under this instance's share of the limit (the
// instances count each other while Redis answers: peers.go), and Redis is probed in the
// background until it answers again; no call waits longer than the store's timeout.
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

// useRedis tells whether a call should go to Redis now.
func (b *Buckets) useRedis() bool { return b.shared != nil && b.shared.Up() }

// cost is how many tokens a request takes from a bucket in this process's memory: 1 without
// Redis; with Redis (a call it did not answer), the number of instances sharing it, so that
// each allows its share of the limit, Requests/n per Window and Burst/n at once (never less
// than one request at once: the cost is at most Burst).
func (b *Buckets) cost() int { return min(b.shared.Instances(), b.limit.Burst) }

// Blocked reports whether id has no request left at t, and how long until it has one. It
// charges nothing: it is Admit's gate (Request.Peek) alone.
func (b *Buckets) Blocked(ctx context.Context, id string, t time.Time) (bool, time.Duration) {
	denied, wait := Admit(ctx, t, []Request{{Buckets: b, ID: id, Peek: true}}, nil, nil, nil)
	return denied == 0, wait
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
	res, ok, wait := b.mem.take(id, t, b.cost())
	if !ok {
		return Taken{}, false, wait
	}
	return Taken{b: b, id: id, res: res, t: t}, true, 0
}

// Request is one charge of Admit: one request of ID against Buckets. A Peek request charges
// nothing: it only refuses when ID has no request left (a gate, such as the limit on failed
// authentications of a client address).
type Request struct {
	Buckets *Buckets
	ID      string
	Peek    bool
}

// State is a bucket's state after a request, for the RateLimit response headers.
type State struct {
	Remaining int           // whole requests left now
	Reset     time.Duration // until the next request is restored
}

// stateOf is the State of a bucket of l holding tokens after a request.
func stateOf(l Limit, tokens float64) State { return stateOfCost(l, tokens, 1) }

// stateOfCost is the State of a bucket of l holding tokens after a request, where a request
// takes cost tokens (Buckets.cost).
func stateOfCost(l Limit, tokens float64, cost int) State {
	c := float64(cost)
	st := State{Remaining: int(tokens / c)}
	if tokens >= float64(l.Burst) {
		st.Reset = l.Every() * time.Duration(cost)
	} else {
		st.Reset = untilTokens(l.rate(), tokens, (math.Floor(tokens/c)+1)*c)
	}
	return st
}

// MaxTakeAll is the most buckets Admit counts a request against at once.
const MaxTakeAll = 5

// Place asks Admit for one of Max places of ID in Slots as well (a concurrent generation of an
// account, a request on a model host). An Optional place is taken if free and otherwise left
// out, without refusing the request.
type Place struct {
	Slots    *Slots
	ID       string
	Max      int
	Optional bool
}

// MaxPlaces is the most places Admit takes at once.
const MaxPlaces = 2

// Admit counts one request against each of reqs (at most MaxTakeAll) and takes one of each of
// places (at most MaxPlaces): all or none. If a bucket is empty, nothing is counted and denied
// is the index of the one that refuses longest, with the wait; if the buckets allow but a
// required place is full, denied is len(reqs) plus the place's index. Else denied is -1,
// states[i] is filled in for each bucket, and slots[j] is the place taken for places[j] (the zero
// Slot for an optional place that was full): release them when the request ends. With Redis it
// is one round trip (one script), so instances sharing the limits never let more through
// together than the limits. The buckets and places must use the same store (one Shared or none).
func Admit(ctx context.Context, t time.Time, reqs []Request, places []Place, states []State, slots []Slot) (denied int, wait time.Duration) {
	if len(reqs) > MaxTakeAll || len(places) > MaxPlaces {
		panic("ratelimit: Admit of more than MaxTakeAll requests or MaxPlaces places")
	}
	var s *Shared
	switch {
	case len(reqs) > 0:
		s = reqs[0].Buckets.shared
	case len(places) > 0:
		s = places[0].Slots.shared
	default:
		return -1, 0
	}
	if s != nil && s.Up() {
		var keys, members [MaxPlaces]string
		for j, p := range places {
			keys[j], members[j] = p.Slots.redisPlace(p.ID)
		}
		var taken [MaxPlaces]bool
		denied, wait, err := s.admit(ctx, reqs, places, keys[:len(places)], members[:len(places)], states, taken[:len(places)])
		if err == nil {
			if denied == -1 {
				for j, p := range places {
					slots[j] = Slot{}
					if taken[j] {
						slots[j] = p.Slots.held(p.ID, keys[j], members[j])
					}
				}
			}
			return denied, wait
		}
		s.failed(ctx, err)
	}
	s.fellBack()
	var takePlaces func() int
	if len(places) > 0 {
		takePlaces = func() int {
			for j, p := range places {
				sl, ok := p.Slots.acquireMemory(p.ID, p.Max)
				if !ok && !p.Optional {
					for _, got := range slots[:j] {
						got.Release()
					}
					return j
				}
				slots[j] = sl
			}
			return -1
		}
	}
	return takeAllMemory(t, reqs, states, takePlaces)
}

// TakeAll is Admit without places.
func TakeAll(ctx context.Context, t time.Time, reqs []Request, states []State) (denied int, wait time.Duration) {
	return Admit(ctx, t, reqs, nil, states, nil)
}
