package ratelimit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Shared is a Redis server that keeps the limits of every instance that names it. Each call
// is bounded by the store's timeout; a call that fails (Redis down, slow, refusing) marks the
// store down: from then on every call is answered from this process's memory at once, and a
// background probe brings the store back when Redis answers again.
type Shared struct {
	rdb     *redis.Client
	rl      *redis_rate.Limiter
	name    string // the URL without its password, for logs
	timeout time.Duration
	probe   time.Duration
	log     *zap.Logger

	down      atomic.Bool
	fails     atomic.Int32  // calls failed in a row while up
	fallbacks atomic.Uint64 // calls answered from memory because the store was down

	// Instances: every store beats under its own id while Redis answers, and counts the
	// stores that beat in the last peerStale (itself included). While Redis is down, each
	// instance allows its share of every limit: the limit divided by the instances it last saw.
	id     string
	beat   time.Duration
	peers  atomic.Int32
	beaten chan struct{} // closed when the heartbeat loop has ended

	mu      sync.Mutex
	probing bool
	closed  chan struct{}
	isClose bool
}

// SharedOptions tune a Shared store.
type SharedOptions struct {
	// Timeout bounds every call (a script, a command, a connection from the pool); default
	// DefaultTimeout, or the URL's read_timeout when it names one.
	Timeout time.Duration
	// ProbeEvery is the pause between two probes of a store that is down; default 500ms.
	ProbeEvery time.Duration
	// Logger receives one line when the store goes down and one when it is back.
	Logger *zap.Logger
	// HeartbeatEvery is the pause between two heartbeats, by which the instances sharing the
	// store count each other; default 1s. An instance is counted until peerStale beats after
	// its last one.
	HeartbeatEvery time.Duration
}

// DefaultTimeout is the longest a request waits for Redis before its limits are checked in
// memory instead. Redis on the same network answers in well under a millisecond; the margin is
// for a busy machine.
const DefaultTimeout = 200 * time.Millisecond

// downAfter is how many calls in a row must fail before the store counts as down. A single
// slow call (a busy moment) falls back alone; a Redis that is gone fails every call at once.
const downAfter = 3

// OpenShared prepares the Redis store at rawURL (redis://[user:password@]host:port/db, rediss://
// for TLS, or unix://; go-redis's URL options such as dial_timeout or pool_size are accepted). It
// does not connect: the first call does, and a Redis that is down then is a store that is down.
func OpenShared(rawURL string, opts SharedOptions) (*Shared, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("limits store %s: %w", Redact(rawURL), err)
	}
	q := url.Values{}
	if u, err := url.Parse(rawURL); err == nil {
		q = u.Query()
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
		if q.Has("read_timeout") && o.ReadTimeout > 0 {
			timeout = o.ReadTimeout
		}
	}
	if !q.Has("read_timeout") {
		o.ReadTimeout = timeout
	}
	if !q.Has("write_timeout") {
		o.WriteTimeout = timeout
	}
	if !q.Has("dial_timeout") {
		o.DialTimeout = max(timeout, 250*time.Millisecond)
	}
	if !q.Has("pool_timeout") {
		o.PoolTimeout = timeout
	}
	if !q.Has("pool_size") {
		// Every request waits for a connection within the timeout: enough of them for a
		// burst of requests, each holding one for one round trip.
		o.PoolSize = max(o.PoolSize, 128)
	}
	if !q.Has("max_retries") {
		o.MaxRetries = 1 // one retry for a pooled connection Redis closed; the context bounds both
	}
	o.ContextTimeoutEnabled = true
	if opts.ProbeEvery <= 0 {
		opts.ProbeEvery = 500 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.HeartbeatEvery <= 0 {
		opts.HeartbeatEvery = time.Second
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	rdb := redis.NewClient(o)
	s := &Shared{
		rdb: rdb, rl: redis_rate.NewLimiter(rdb), name: Redact(rawURL), timeout: timeout,
		probe: opts.ProbeEvery, log: opts.Logger, closed: make(chan struct{}),
		id: hex.EncodeToString(id[:]), beat: opts.HeartbeatEvery, beaten: make(chan struct{}),
	}
	s.peers.Store(1)
	go s.heartbeatLoop()
	return s, nil
}

// Redact is rawURL without its password, for logs and messages.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(a redis URL that does not parse)"
	}
	return u.Redacted()
}

// Name is the store's URL without its password.
func (s *Shared) Name() string { return s.name }

// Up tells whether calls go to Redis now (false: to this process's memory, while a probe waits
// for Redis to answer again).
func (s *Shared) Up() bool { return !s.down.Load() }

// Fallbacks counts the calls answered from this process's memory because Redis was down.
func (s *Shared) Fallbacks() uint64 {
	if s == nil {
		return 0
	}
	return s.fallbacks.Load()
}

// Ping checks that Redis answers, within the store's timeout.
func (s *Shared) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.rdb.Ping(ctx).Err()
}

// Close stops the probe and the heartbeat, takes this instance out of the count (so the others
// stop counting it at once rather than after peerStale) and closes the connections.
func (s *Shared) Close() error {
	s.mu.Lock()
	first := !s.isClose
	if first {
		s.isClose = true
		close(s.closed)
	}
	s.mu.Unlock()
	if first {
		<-s.beaten
		if s.Up() {
			_ = s.call(context.Background(), func(ctx context.Context) error {
				return s.rdb.ZRem(ctx, peersKey, s.id).Err()
			})
		}
	}
	return s.rdb.Close()
}

// call runs f with the store's timeout.
func (s *Shared) call(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	err := f(ctx)
	if err == nil && s.fails.Load() != 0 {
		s.fails.Store(0)
	}
	return err
}

// fellBack counts a call answered from memory. Safe on a nil store (memory only: not a
// fallback).
func (s *Shared) fellBack() {
	if s != nil {
		s.fallbacks.Add(1)
		totalFallbacks.Add(1)
	}
}

// totalFallbacks counts the fallbacks of every store of the process, closed ones included.
var totalFallbacks atomic.Uint64

// TotalFallbacks counts the calls of every store of this process that were answered from
// memory because Redis was down (a counter: it never goes down).
func TotalFallbacks() uint64 { return totalFallbacks.Load() }

// failed takes note of a call that failed. A caller whose own context ended (a client that went
// away) says nothing about Redis; any other failure marks the store down and starts the probe.
func (s *Shared) failed(ctx context.Context, err error) {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return
	}
	if errors.Is(err, redis.ErrPoolTimeout) {
		return // this instance has more calls under way than connections: not Redis's fault
	}
	if s.fails.Add(1) < downAfter || !s.down.CompareAndSwap(false, true) {
		return
	}
	s.log.Warn("limits store is unavailable: limits are counted in this instance's memory until it answers again",
		zap.String("store", s.name), zap.Error(err))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.probing || s.isClose {
		return
	}
	s.probing = true
	go s.probeUntilUp()
}

// probeUntilUp pings Redis until it answers, then marks the store up.
func (s *Shared) probeUntilUp() {
	t := time.NewTicker(s.probe)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
		if err := s.Ping(context.Background()); err != nil {
			continue
		}
		s.mu.Lock()
		s.probing = false
		s.mu.Unlock()
		s.fails.Store(0)
		s.down.Store(false)
		s.log.Info("limits store is back: limits are shared again", zap.String("store", s.name))
		return
	}
}

// keyPrefix is the Redis key prefix of one kind ("rl": buckets, "slots": places) of one named
// limit. Names and identities are hashed: an email or a client address never appears in Redis.
func (s *Shared) keyPrefix(kind, name string) string {
	return "textgen:" + kind + ":" + hashID(name) + ":"
}

// hashID is a short, fixed-length digest of id for Redis keys.
func hashID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return base64.RawURLEncoding.EncodeToString(sum[:15])
}

// key is the Redis key of id's bucket (without redis_rate's own "rate:" prefix).
func (b *Buckets) key(id string) string { return b.prefix + hashID(id) }
