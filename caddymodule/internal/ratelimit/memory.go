package ratelimit

import (
	"hash/maphash"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// shards spreads the buckets over separately locked maps, so concurrent requests of different
// identities do not wait for each other.
const shards = 32

// DefaultMaxEntries bounds the buckets of one Buckets in memory. Idle buckets are dropped anyway
// (a bucket that has refilled is the same as a new one); the cap only matters under a flood of
// distinct identities (client addresses), when a random bucket makes room for a new one.
const DefaultMaxEntries = 1 << 20

// sweepEvery is how often a shard drops its refilled buckets.
const sweepEvery = time.Minute

// memory holds the token buckets of one Limit in this process, one per identity: the whole
// store without Redis, and the fallback while Redis cannot answer.
type memory struct {
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

func newMemory(l Limit, maxEntries int) *memory {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	b := &memory{limit: l, r: l.rate(), maxEntries: maxEntries, seed: maphash.MakeSeed()}
	for i := range b.shards {
		b.shards[i].m = make(map[string]*rate.Limiter)
	}
	return b
}

func (b *memory) shard(id string) *shard {
	return &b.shards[maphash.String(b.seed, id)%shards]
}

// get returns the bucket of id, creating a full one. Called with sh.mu held.
func (b *memory) get(sh *shard, id string, t time.Time) *rate.Limiter {
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
		per := max(b.maxEntries/shards, 1)
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

func (b *memory) len() int {
	n := 0
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

func (b *memory) blocked(id string, t time.Time, cost int) (bool, time.Duration) {
	sh := b.shard(id)
	sh.mu.Lock()
	lim := sh.m[id]
	var tokens float64
	if lim != nil {
		tokens = lim.TokensAt(t)
	}
	sh.mu.Unlock()
	if lim == nil || tokens >= float64(cost) {
		return false, 0
	}
	return true, untilTokens(b.r, tokens, float64(cost))
}

func (b *memory) reset(id string) {
	sh := b.shard(id)
	sh.mu.Lock()
	delete(sh.m, id)
	sh.mu.Unlock()
}

func (b *memory) refund(id string, res *rate.Reservation, t time.Time) {
	sh := b.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	res.CancelAt(t)
}

func (b *memory) take(id string, t time.Time, cost int) (res *rate.Reservation, ok bool, wait time.Duration) {
	sh := b.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	res = b.get(sh, id, t).ReserveN(t, cost)
	if d := res.DelayFrom(t); d > 0 {
		res.CancelAt(t)
		return nil, false, d
	}
	return res, true, 0
}

// takeAllMemory is Admit in memory. places, when not nil, runs once every bucket has allowed the
// request and returns -1, or the index of a required place that is full: then nothing is
// counted and denied is len(reqs) plus that index.
func takeAllMemory(t time.Time, reqs []Request, states []State, places func() int) (denied int, wait time.Duration) {
	var (
		lims [MaxTakeAll]*rate.Limiter
		resv [MaxTakeAll]*rate.Reservation
	)
	denied = -1
	var costs [MaxTakeAll]int
	for i, rq := range reqs {
		m := rq.Buckets.mem
		costs[i] = rq.Buckets.cost()
		if rq.Peek {
			if blocked, d := m.blocked(rq.ID, t, costs[i]); blocked && d > wait {
				denied, wait = i, d
			}
			continue
		}
		sh := m.shard(rq.ID)
		sh.mu.Lock()
		lims[i] = m.get(sh, rq.ID, t)
		resv[i] = lims[i].ReserveN(t, costs[i])
		sh.mu.Unlock()
		if d := resv[i].DelayFrom(t); d > 0 && d > wait {
			denied, wait = i, d
		}
	}
	if denied < 0 && places != nil {
		if j := places(); j >= 0 {
			denied, wait = len(reqs)+j, time.Second
		}
	}
	if denied >= 0 {
		for i, rq := range reqs {
			if rq.Peek {
				continue
			}
			sh := rq.Buckets.mem.shard(rq.ID)
			sh.mu.Lock()
			resv[i].CancelAt(t)
			sh.mu.Unlock()
		}
		return denied, wait
	}
	for i, rq := range reqs {
		if !rq.Peek {
			states[i] = stateOfCost(rq.Buckets.limit, math.Max(0, lims[i].TokensAt(t)), costs[i])
		}
	}
	return -1, 0
}

// untilTokens is how long a bucket refilling at r takes from tokens to want.
func untilTokens(r rate.Limit, tokens, want float64) time.Duration {
	return time.Duration((want - tokens) / float64(r) * float64(time.Second))
}
