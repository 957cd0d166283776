package ratelimit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// How the instances sharing a Redis store count each other, so that while Redis is down each
// allows only its share of every limit instead of the whole of it (two instances would
// otherwise let twice each limit through until Redis answers again).
//
// Every store beats once per HeartbeatEvery while Redis answers: one script adds its id with
// Redis's time to one sorted set, drops the ids that have not beaten for peerStale beats, and
// returns how many are left. That count, kept when Redis goes away, is the divisor of the
// limits counted in memory meanwhile (Buckets.cost, Slots.memoryCap). An instance that starts
// while Redis is down has seen no other and counts itself alone.

// peerStale is how many beats an instance that stopped beating is still counted: a slow beat
// does not make the others count one instance fewer.
const peerStale = 5

// peersScript beats for ARGV[1] and counts the ids of KEYS[1] that beat within ARGV[2] ms.
var peersScript = redis.NewScript(`
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call("ZADD", KEYS[1], now, ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now - tonumber(ARGV[2]))
redis.call("PEXPIRE", KEYS[1], ARGV[2])
return redis.call("ZCARD", KEYS[1])
`)

// peersKey is the sorted set of the instances' ids.
const peersKey = "textgen:instances"

// heartbeatLoop beats at once and then once per s.beat until the store is closed. A beat while
// the store is down is skipped (the probe looks for Redis); a failed beat changes nothing: the
// requests' own calls decide when the store is down.
func (s *Shared) heartbeatLoop() {
	defer close(s.beaten)
	t := time.NewTicker(s.beat)
	defer t.Stop()
	for {
		if s.Up() {
			s.heartbeat()
		}
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
	}
}

// heartbeat beats once and keeps the count of instances.
func (s *Shared) heartbeat() {
	stale := (peerStale * s.beat).Milliseconds()
	_ = s.call(context.Background(), func(ctx context.Context) error {
		n, err := peersScript.Run(ctx, s.rdb, []string{peersKey}, s.id, stale).Int()
		if err == nil && n > 0 {
			s.peers.Store(int32(n))
		}
		return err
	})
}

// Instances is how many instances share the store, this one included, as last counted while
// Redis answered: 1 for a nil store, or before the first count.
func (s *Shared) Instances() int {
	if s == nil {
		return 1
	}
	return int(s.peers.Load())
}
