package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Slots counts places in use per identity (the generations an account runs, the requests a
// model host runs), at most a given number each. In Redis a place is a member of a sorted set
// whose score is its expiry: the instance holding it renews it while it runs, so the places of
// an instance that dies come back by themselves within the expiry. Without Redis, or while it
// cannot answer, places are counted in this process's memory.
type Slots struct {
	shared *Shared // nil: memory only
	prefix string
	expiry time.Duration
	owner  string // this process's member prefix
	seq    atomic.Uint64

	mu   sync.Mutex
	mem  map[string]int                 // places taken in memory, per identity
	hold map[string]map[string]struct{} // Redis key -> members this process holds
	stop chan struct{}
	done chan struct{}
	// released carries the places given back in Redis to releaseLoop, which sends them in
	// batches (one pipeline): a response never waits for its places to be given back.
	released    chan place
	releaseDone chan struct{}
}

// place is a member of a sorted set in Redis.
type place struct{ key, member string }

// DefaultSlotExpiry is how long a place in Redis outlives an instance that died holding it.
const DefaultSlotExpiry = 30 * time.Second

// NewSlots returns places kept in s (nil: in memory) under name; places in Redis expire after
// expiry (0: DefaultSlotExpiry) unless renewed. Close stops the renewals.
func NewSlots(s *Shared, name string, expiry time.Duration) *Slots {
	if expiry <= 0 {
		expiry = DefaultSlotExpiry
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	sl := &Slots{shared: s, expiry: expiry, owner: hex.EncodeToString(b[:]), mem: map[string]int{},
		hold: map[string]map[string]struct{}{}}
	if s != nil {
		sl.prefix = s.keyPrefix("slots", name)
		sl.stop, sl.done = make(chan struct{}), make(chan struct{})
		sl.released, sl.releaseDone = make(chan place, 4096), make(chan struct{})
		go sl.renewLoop()
		go sl.releaseLoop()
	}
	return sl
}

// Close stops renewing the places held in Redis (they expire).
func (sl *Slots) Close() {
	if sl.stop != nil {
		close(sl.stop)
		<-sl.done
		<-sl.releaseDone
		sl.stop = nil
	}
}

// Slot is one place taken by Acquire; Release gives it back.
type Slot struct {
	sl     *Slots
	id     string
	key    string // Redis key; "" when taken in memory
	member string
}

// Acquire takes one of max places of id; false when all are taken. It is Admit with this one
// place.
func (sl *Slots) Acquire(ctx context.Context, id string, max int) (Slot, bool) {
	var got [1]Slot
	if denied, _ := Admit(ctx, time.Time{}, nil, []Place{{Slots: sl, ID: id, Max: max}}, nil, got[:]); denied >= 0 {
		return Slot{}, false
	}
	return got[0], true
}

// redisPlace is the Redis key of id's places and a new member for one of them.
func (sl *Slots) redisPlace(id string) (key, member string) {
	return sl.prefix + hashID(id), sl.owner + ":" + strconv.FormatUint(sl.seq.Add(1), 36)
}

// held records a place taken in Redis, for the renewals, and returns it.
func (sl *Slots) held(id, key, member string) Slot {
	sl.mu.Lock()
	m := sl.hold[key]
	if m == nil {
		m = map[string]struct{}{}
		sl.hold[key] = m
	}
	m[member] = struct{}{}
	sl.mu.Unlock()
	return Slot{sl: sl, id: id, key: key, member: member}
}

// acquireMemory takes one of max places of id in this process's memory: with a Redis store
// (a call it did not answer), one of this instance's share of them.
func (sl *Slots) acquireMemory(id string, max int) (Slot, bool) {
	max = sl.memoryCap(max)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.mem[id] >= max {
		return Slot{}, false
	}
	sl.mem[id]++
	return Slot{sl: sl, id: id}, true
}

// memoryCap is this instance's share of places while they are counted in memory: max
// divided by the instances sharing the Redis store (rounded down, at least one), so that the
// instances together hold at most places (or one each, when there are more instances than
// places).
func (sl *Slots) memoryCap(places int) int {
	return min(places, max(1, places/sl.shared.Instances()))
}

// Release gives the place back. Safe on the zero Slot.
func (s Slot) Release() {
	sl := s.sl
	if sl == nil {
		return
	}
	if s.key == "" {
		sl.mu.Lock()
		if n := sl.mem[s.id] - 1; n > 0 {
			sl.mem[s.id] = n
		} else {
			delete(sl.mem, s.id) // memory follows the identities holding places now
		}
		sl.mu.Unlock()
		return
	}
	sl.mu.Lock()
	if m := sl.hold[s.key]; m != nil {
		delete(m, s.member)
		if len(m) == 0 {
			delete(sl.hold, s.key)
		}
	}
	sl.mu.Unlock()
	// Given back in the background, soon; if Redis does not answer, the place expires.
	select {
	case sl.released <- place{s.key, s.member}:
	default: // the queue is full: give it back here
		sl.remove([]place{{s.key, s.member}})
	}
}

// releaseBatch is the most places releaseLoop gives back in one pipeline, releaseDelay the
// longest a released place stays counted before it is sent (it is counted a little longer: never
// fewer than run).
const (
	releaseBatch = 256
	releaseDelay = 20 * time.Millisecond
)

// releaseLoop gives back the released places in batches.
func (sl *Slots) releaseLoop() {
	defer close(sl.releaseDone)
	batch := make([]place, 0, releaseBatch)
	for {
		select {
		case p := <-sl.released:
			batch = append(batch[:0], p)
		case <-sl.stop:
			for { // give back what is queued, then stop
				select {
				case p := <-sl.released:
					sl.remove([]place{p})
				default:
					return
				}
			}
		}
		// Gather what comes within releaseDelay: one pipeline for many places costs the
		// requests being served far less than one round trip each.
		timer := time.NewTimer(releaseDelay)
	more:
		for len(batch) < releaseBatch {
			select {
			case p := <-sl.released:
				batch = append(batch, p)
			case <-timer.C:
				break more
			case <-sl.stop:
				break more
			}
		}
		timer.Stop()
		sl.remove(batch)
	}
}

// remove deletes places from Redis in one pipeline.
func (sl *Slots) remove(ps []place) {
	if !sl.shared.Up() {
		return // they expire
	}
	err := sl.shared.call(context.Background(), func(ctx context.Context) error {
		if len(ps) == 1 {
			return sl.shared.rdb.ZRem(ctx, ps[0].key, ps[0].member).Err()
		}
		pipe := sl.shared.rdb.Pipeline()
		for _, p := range ps {
			pipe.ZRem(ctx, p.key, p.member)
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		sl.shared.failed(context.Background(), err)
	}
}

// Running is the number of places of id taken now: in Redis (every instance's), or in this
// process's memory.
func (sl *Slots) Running(ctx context.Context, id string) int {
	if sl.shared != nil && sl.shared.Up() {
		key := sl.prefix + hashID(id)
		var n int64
		err := sl.shared.call(ctx, func(ctx context.Context) error {
			var err error
			n, err = sl.shared.rdb.ZCount(ctx, key, strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf").Result()
			return err
		})
		if err == nil {
			return int(n)
		}
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.mem[id]
}

// renewScript renews the places ARGV[2..] of KEYS[1] for ARGV[1] ms more. A place that expired
// meanwhile (Redis was unreachable for longer than the expiry) is put back: its generation is
// still running.
var renewScript = redis.NewScript(`
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local exp = now + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call("ZADD", KEYS[1], exp, ARGV[i])
end
redis.call("PEXPIRE", KEYS[1], ARGV[1])
return 1
`)

// renewLoop renews the places this process holds in Redis three times per expiry.
func (sl *Slots) renewLoop() {
	defer close(sl.done)
	t := time.NewTicker(sl.expiry / 3)
	defer t.Stop()
	for {
		select {
		case <-sl.stop:
			return
		case <-t.C:
		}
		sl.mu.Lock()
		batch := make(map[string][]any, len(sl.hold))
		for key, m := range sl.hold {
			args := make([]any, 0, len(m)+1)
			args = append(args, sl.expiry.Milliseconds())
			for member := range m {
				args = append(args, member)
			}
			batch[key] = args
		}
		sl.mu.Unlock()
		if len(batch) == 0 || !sl.shared.Up() {
			continue
		}
		err := sl.shared.call(context.Background(), func(ctx context.Context) error {
			pipe := sl.shared.rdb.Pipeline()
			for key, args := range batch {
				renewScript.Eval(ctx, pipe, []string{key}, args...) // Eval: a pipeline cannot fall back from EVALSHA
			}
			_, err := pipe.Exec(ctx)
			return err
		})
		if err != nil {
			sl.shared.failed(context.Background(), err)
		}
	}
}
