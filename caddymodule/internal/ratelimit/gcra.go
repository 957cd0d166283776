package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// The buckets in Redis. A bucket is one key holding its "theoretical arrival time" (GCRA), the
// token bucket's state in one number, with Redis's own clock (TIME) so that the instances' clocks
// never matter. One identity's request goes through github.com/go-redis/redis_rate (Take,
// Reset). What it does not have is below, in the same key format and arithmetic: all or none over
// several buckets and places in one round trip (Admit: a request counts against its key's, its
// account's and its tool's limits together, or against none; a gate is looked at without being
// charged), and a refund.

// rrLimit is l as redis_rate takes it.
func rrLimit(l Limit) redis_rate.Limit {
	return redis_rate.Limit{Rate: l.Requests, Burst: l.Burst, Period: l.Window}
}

// redisRatePrefix is the prefix redis_rate puts before every key; the scripts below use it too.
const redisRatePrefix = "rate:"

func (s *Shared) take(ctx context.Context, key string, l Limit) (ok bool, wait time.Duration, err error) {
	err = s.call(ctx, func(ctx context.Context) error {
		res, err := s.rl.Allow(ctx, key, rrLimit(l))
		if err != nil {
			return err
		}
		ok, wait = res.Allowed > 0, res.RetryAfter
		return nil
	})
	return ok, wait, err
}

func (s *Shared) reset(ctx context.Context, key string) error {
	return s.call(ctx, func(ctx context.Context) error { return s.rl.Reset(ctx, key) })
}

// gcraNow is Redis's clock in redis_rate's units: seconds since 2017-01-01 (a float that keeps
// microseconds until 2048).
const gcraNow = `
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
`

// admitScript counts one request against each of the ARGV[1] buckets first in KEYS (ARGV from
// 3: burst, rate, period in seconds, and 1 for a gate (Request.Peek), for each) and takes a place in each of the ARGV[2] sorted
// sets after them (ARGV then: the most places, their expiry in ms, the member, 1 if optional,
// for each), all or none; an optional place that is full is left out. It answers
// {-1, taken, remaining...} (taken: a bit per place taken; remaining: the requests left in each
// bucket afterwards, as strings), or {i, wait}: i is the 0-based index of the bucket that refuses
// longest, or the number of buckets plus the index of a required place that is full; wait in
// seconds.
var admitScript = redis.NewScript(gcraNow + `
local n, np = tonumber(ARGV[1]), tonumber(ARGV[2])
local tats, rems = {}, {}
local denied, wait = -1, 0
for i = 1, n do
  local a = 4 * i - 1
  local burst, rate, period = tonumber(ARGV[a]), tonumber(ARGV[a+1]), tonumber(ARGV[a+2])
  local ei = period / rate
  local tat = tonumber(redis.call("GET", KEYS[i]) or now)
  tat = math.max(tat, now)
  if ARGV[a+3] == "1" then
    -- a gate: refuses when less than one request is left, charges nothing
    local diff = now - (tat - ei * burst)
    if diff < ei and ei - diff > wait then
      denied, wait = i - 1, ei - diff
    end
    tats[i], rems[i] = false, 0
  else
    local new_tat = tat + ei
    local diff = now - (new_tat - ei * burst)
    if diff < 0 and -diff > wait then
      denied, wait = i - 1, -diff
    end
    tats[i], rems[i] = new_tat, diff / ei
  end
end
if denied >= 0 then
  return {denied, tostring(wait)}
end
local ms = t[1] * 1000 + math.floor(t[2] / 1000)
local free = {}
for j = 1, np do
  local a = 4 * n + 4 * j - 1
  local key, most = KEYS[n + j], tonumber(ARGV[a])
  redis.call("ZREMRANGEBYSCORE", key, "-inf", ms)
  free[j] = redis.call("ZCARD", key) < most
  if not free[j] and ARGV[a + 3] ~= "1" then
    return {n + j - 1, "1"}
  end
end
local taken = 0
for j = 1, np do
  if free[j] then
    local a = 4 * n + 4 * j - 1
    local key, expiry = KEYS[n + j], tonumber(ARGV[a + 1])
    redis.call("ZADD", key, ms + expiry, ARGV[a + 2])
    redis.call("PEXPIRE", key, expiry)
    taken = taken + 2 ^ (j - 1)
  end
end
local out = {-1, taken}
for i = 1, n do
  if tats[i] then
    redis.call("SET", KEYS[i], tats[i], "EX", math.ceil(tats[i] - now))
  end
  out[i + 2] = tostring(rems[i])
end
return out
`)

// admit is Admit in Redis: placeKeys and members are the sorted set and new member of each place.
func (s *Shared) admit(ctx context.Context, reqs []Request, places []Place, placeKeys, members []string, states []State, taken []bool) (denied int, wait time.Duration, err error) {
	var keys [MaxTakeAll + MaxPlaces]string
	var args [2 + 4*MaxTakeAll + 4*MaxPlaces]any
	args[0], args[1] = len(reqs), len(places)
	for i, rq := range reqs {
		l := rq.Buckets.limit
		keys[i] = redisRatePrefix + rq.Buckets.key(rq.ID)
		peek := 0
		if rq.Peek {
			peek = 1
		}
		args[4*i+2], args[4*i+3], args[4*i+4], args[4*i+5] = l.Burst, l.Requests, l.Window.Seconds(), peek
	}
	nk, na := len(reqs), 4*len(reqs)+2
	for j, p := range places {
		opt := 0
		if p.Optional {
			opt = 1
		}
		keys[nk] = placeKeys[j]
		args[na], args[na+1], args[na+2], args[na+3] = p.Max, p.Slots.expiry.Milliseconds(), members[j], opt
		nk, na = nk+1, na+4
	}
	err = s.call(ctx, func(ctx context.Context) error {
		v, err := admitScript.Run(ctx, s.rdb, keys[:nk], args[:na]...).Slice()
		if err != nil {
			return err
		}
		if len(v) < 2 {
			return fmt.Errorf("ratelimit: admit script answered %v", v)
		}
		d, _ := v[0].(int64)
		if d >= 0 {
			secs, err := floatOf(v, 1)
			if err != nil {
				return err
			}
			denied, wait = int(d), time.Duration(secs*float64(time.Second))
			return nil
		}
		if len(v) != len(reqs)+2 {
			return fmt.Errorf("ratelimit: admit script answered %d values for %d buckets", len(v), len(reqs))
		}
		bits, _ := v[1].(int64)
		for j := range places {
			taken[j] = bits&(1<<j) != 0
		}
		for i, rq := range reqs {
			if rq.Peek {
				continue
			}
			rem, err := floatOf(v, i+2)
			if err != nil {
				return err
			}
			states[i] = stateOf(rq.Buckets.limit, max(rem, 0))
		}
		denied = -1
		return nil
	})
	return denied, wait, err
}

// refundScript gives one request back to the bucket KEYS[1] (ARGV: burst, rate, period), never
// beyond a full bucket.
var refundScript = redis.NewScript(gcraNow + `
local tat = tonumber(redis.call("GET", KEYS[1]))
if not tat then return 0 end
local ei = tonumber(ARGV[3]) / tonumber(ARGV[2])
local new_tat = tat - ei
if new_tat <= now then
  redis.call("DEL", KEYS[1])
else
  redis.call("SET", KEYS[1], new_tat, "EX", math.ceil(new_tat - now))
end
return 1
`)

func (s *Shared) refund(ctx context.Context, key string, l Limit) error {
	return s.call(ctx, func(ctx context.Context) error {
		return refundScript.Run(ctx, s.rdb, []string{redisRatePrefix + key}, l.Burst, l.Requests, l.Window.Seconds()).Err()
	})
}

// floatOf reads v[i], a number the script sent as a string.
func floatOf(v []any, i int) (float64, error) {
	if i >= len(v) {
		return 0, fmt.Errorf("ratelimit: script answered %d values, want more than %d", len(v), i)
	}
	str, ok := v[i].(string)
	if !ok {
		return 0, fmt.Errorf("ratelimit: script value %d is %T", i, v[i])
	}
	return strconv.ParseFloat(str, 64)
}
