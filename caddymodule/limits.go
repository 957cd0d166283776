package caddymodule

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"golang.org/x/time/rate"

	"github.com/caddy-textgen/textgen/caddymodule/internal/clientip"
)

// RateLimit is a token bucket: Requests per Window on average, at most Burst at once. A request
// refused by a limit costs nothing and does not use up the limit.
type RateLimit struct {
	// Requests is how many requests the limit allows per Window. Required unless Off.
	Requests int `json:"requests,omitempty"`
	// Window is the period of Requests, at least 1s. Default: 1m.
	Window caddy.Duration `json:"window,omitempty"`
	// Burst is how many requests may come at once (the bucket's size). Default: Requests.
	Burst int `json:"burst,omitempty"`
	// Off turns a limit that is on by default off. Only for the handler-wide limits.
	Off bool `json:"off,omitempty"`
}

// RateLimits are the request limits per API key and per account.
type RateLimits struct {
	// Key limits the generate requests of one API key. Default (handler-wide): 60 per minute,
	// burst 20. In a tool's block: no default.
	Key *RateLimit `json:"key,omitempty"`
	// Account limits the generate requests of all keys of one account together. Default
	// (handler-wide): 120 per minute (burst 120). In a tool's block: no default.
	Account *RateLimit `json:"account,omitempty"`
}

// Defaults of the limits (README "Limits and monitoring").
var (
	defaultKeyLimit         = RateLimit{Requests: 60, Window: caddy.Duration(time.Minute), Burst: 20}
	defaultAccountLimit     = RateLimit{Requests: 120, Window: caddy.Duration(time.Minute)}
	defaultAuthFailureLimit = RateLimit{Requests: 30, Window: caddy.Duration(time.Minute)}
)

const (
	defaultMaxConcurrentPerAccount = 4
	defaultMaxInFlight             = 8
	defaultQueueSize               = 32
	defaultQueueTimeout            = 10 * time.Second
	defaultBodyReadTimeout         = 10 * time.Second
)

// withDefaults fills in the window and burst; nil stays nil.
func (l *RateLimit) withDefaults() *RateLimit {
	if l == nil || l.Off {
		return l
	}
	c := *l
	if c.Window == 0 {
		c.Window = caddy.Duration(time.Minute)
	}
	if c.Burst == 0 {
		c.Burst = c.Requests
	}
	return &c
}

func (l *RateLimit) validate(field string, offAllowed bool) error {
	if l == nil {
		return nil
	}
	if l.Off {
		if !offAllowed {
			return fmt.Errorf("textgen: %s: off is only allowed for the handler-wide limits", field)
		}
		return nil
	}
	if l.Requests <= 0 {
		return fmt.Errorf("textgen: %s: requests must be at least 1", field)
	}
	if l.Window != 0 && time.Duration(l.Window) < time.Second {
		return fmt.Errorf("textgen: %s: window must be at least 1s", field)
	}
	if l.Burst < 0 {
		return fmt.Errorf("textgen: %s: burst must not be negative", field)
	}
	return nil
}

// String is the limit as the Caddyfile writes it ("60/1m0s burst 20").
func (l *RateLimit) String() string {
	return fmt.Sprintf("%d/%s burst %d", l.Requests, time.Duration(l.Window), l.Burst)
}

// windowSeconds is the window in whole seconds, as the RateLimit-Policy header carries it.
func (l *RateLimit) windowSeconds() int64 {
	return int64(math.Ceil(time.Duration(l.Window).Seconds()))
}

// limitNow is the clock of the rate limits; tests move it forward instead of sleeping.
var limitNow = time.Now

// The limiter state lives in package-level usage pools, keyed by the ledger directory (whose
// keys and accounts the limits count) and the limit, so a config reload that keeps a limit keeps
// its counts: a reload cannot be used to reset them. A changed limit starts afresh.
var (
	limiterPool = caddy.NewUsagePool()
	slotPool    = caddy.NewUsagePool()
)

// limiterShards spreads the buckets over separately locked maps, so concurrent requests of
// different keys do not wait for each other.
const limiterShards = 32

// maxLimiterEntries bounds the buckets of one limit. Idle buckets are dropped anyway (a bucket
// that has refilled is the same as a new one); the cap only matters under a flood of distinct
// client addresses, when a random bucket makes room for a new one.
const maxLimiterEntries = 1 << 20

// sweepEvery is how often a shard drops its refilled buckets.
const sweepEvery = time.Minute

// limiterStore holds the token buckets of one limit, one per identity (key, account, address).
type limiterStore struct {
	limit  rate.Limit
	burst  int
	seed   maphash.Seed
	shards [limiterShards]limiterShard
}

type limiterShard struct {
	mu        sync.Mutex
	m         map[string]*rate.Limiter
	lastSweep time.Time
}

func (*limiterStore) Destruct() error { return nil }

func newLimiterStore(l *RateLimit) *limiterStore {
	s := &limiterStore{
		limit: rate.Limit(float64(l.Requests) / time.Duration(l.Window).Seconds()),
		burst: l.Burst,
		seed:  maphash.MakeSeed(),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*rate.Limiter)
	}
	return s
}

// get returns the bucket of id, creating a full one.
func (s *limiterStore) get(id string, t time.Time) *rate.Limiter {
	sh := &s.shards[maphash.String(s.seed, id)%limiterShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t.Sub(sh.lastSweep) >= sweepEvery {
		sh.sweep(t, s.burst)
	}
	lim := sh.m[id]
	if lim == nil {
		if len(sh.m) >= maxLimiterEntries/limiterShards {
			for k := range sh.m { // drop one (map order is random)
				delete(sh.m, k)
				break
			}
		}
		lim = rate.NewLimiter(s.limit, s.burst)
		sh.m[id] = lim
	}
	return lim
}

// peek returns the bucket of id without creating one (nil: full).
func (s *limiterStore) peek(id string) *rate.Limiter {
	sh := &s.shards[maphash.String(s.seed, id)%limiterShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[id]
}

// sweep drops the buckets that have refilled: they are the same as absent ones.
func (sh *limiterShard) sweep(t time.Time, burst int) {
	sh.lastSweep = t
	for k, lim := range sh.m {
		if lim.TokensAt(t) >= float64(burst) {
			delete(sh.m, k)
		}
	}
}

// size is the number of buckets held (tests).
func (s *limiterStore) size() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// policy is one enforced limit: a name for the RateLimit headers and metrics, its buckets.
type policy struct {
	name      string // "key", "account", "key/summarizer", "auth-failures"
	byAccount bool   // counted per account, else per key (or per client address)
	reason    string // the rejection reason in metrics and logs
	limit     RateLimit
	store     *limiterStore
	item      string // its RateLimit-Policy item
	subject   string // "this API key", for messages
}

func newPolicy(name, reason, subject string, l *RateLimit, store *limiterStore) *policy {
	item := strconv.Quote(name) + ";q=" + strconv.Itoa(l.Requests) + ";w=" + strconv.FormatInt(l.windowSeconds(), 10)
	if l.Burst != l.Requests {
		item += ";textgen-burst=" + strconv.Itoa(l.Burst)
	}
	return &policy{name: name, byAccount: strings.HasPrefix(name, "account"), reason: reason, limit: *l, store: store, item: item, subject: subject}
}

// limitState is a policy's state after a request, for the RateLimit header.
type limitState struct {
	p         *policy
	remaining int
	reset     time.Duration // until the next request is restored to the quota
}

// nextToken is how long until lim, holding tokens (>= 0), gains its next whole token.
func nextToken(lim *rate.Limiter, tokens float64) time.Duration {
	frac := tokens - math.Floor(tokens)
	return time.Duration((1 - frac) / float64(lim.Limit()) * float64(time.Second))
}

// take charges one request to each policy (at most 4), for its identity. If any bucket is
// empty, nothing is charged (the reservations are cancelled) and denied is the index of the
// policy that refuses longest, with the wait; else denied is -1 and states are filled in.
func take(t time.Time, ps []*policy, ids []string, states []limitState) (denied int, wait time.Duration) {
	var (
		lims [4]*rate.Limiter
		resv [4]*rate.Reservation
	)
	denied = -1
	for i, p := range ps {
		lims[i] = p.store.get(ids[i], t)
		resv[i] = lims[i].ReserveN(t, 1)
		if d := resv[i].DelayFrom(t); d > 0 && d > wait {
			denied, wait = i, d
		}
	}
	if denied >= 0 {
		for i := range ps {
			resv[i].CancelAt(t)
		}
		return denied, wait
	}
	for i, p := range ps {
		tokens := math.Max(0, lims[i].TokensAt(t))
		st := limitState{p: p, remaining: int(tokens)}
		if tokens >= float64(p.limit.Burst) {
			st.reset = time.Duration(float64(time.Second) / float64(lims[i].Limit()))
		} else {
			st.reset = nextToken(lims[i], tokens)
		}
		states[i] = st
	}
	return -1, 0
}

// ceilSeconds rounds a wait up to whole seconds, at least 1 (Retry-After and t= carry seconds).
func ceilSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

// setRateHeaders writes the RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-11) for the given states.
func setRateHeaders(hdr http.Header, states []limitState) {
	if len(states) == 0 {
		return
	}
	var pol, cur strings.Builder
	for i, st := range states {
		if i > 0 {
			pol.WriteString(", ")
			cur.WriteString(", ")
		}
		pol.WriteString(st.p.item)
		cur.WriteString(strconv.Quote(st.p.name))
		cur.WriteString(";r=")
		cur.WriteString(strconv.Itoa(st.remaining))
		cur.WriteString(";t=")
		cur.WriteString(strconv.FormatInt(ceilSeconds(st.reset), 10))
	}
	hdr.Set("RateLimit-Policy", pol.String())
	hdr.Set("RateLimit", cur.String())
}

// limits is a handler's runtime limit state.
type limits struct {
	global []*policy            // key, account (either may be off)
	tools  map[string][]*policy // per tool slug, extra limits
	auth   *policy              // failed authentications per client address; nil: off
	slots  *accountSlots        // nil: no cap
	maxCon int
	// poolKeys are the limiterPool keys this handler holds, released in Cleanup.
	poolKeys []string
	slotKey  string
}

// setupLimits resolves the limit config and joins the pooled limiter state of the ledger.
func (h *Handler) setupLimits(ledgerKey string) error {
	lm := &limits{tools: map[string][]*policy{}}
	h.lim = lm
	acquire := func(scope string, l *RateLimit) (*limiterStore, error) {
		key := fmt.Sprintf("%s|%s|%d/%d/%d", ledgerKey, scope, l.Requests, time.Duration(l.Window), l.Burst)
		v, _, err := limiterPool.LoadOrNew(key, func() (caddy.Destructor, error) { return newLimiterStore(l), nil })
		if err != nil {
			return nil, err
		}
		lm.poolKeys = append(lm.poolKeys, key)
		return v.(*limiterStore), nil
	}
	add := func(dst *[]*policy, scope, name, reason, subject string, l *RateLimit) error {
		if l == nil || l.Off {
			return nil
		}
		st, err := acquire(scope, l)
		if err != nil {
			return err
		}
		*dst = append(*dst, newPolicy(name, reason, subject, l, st))
		return nil
	}
	if err := add(&lm.global, "key", "key", "rate_limit_key", "this API key", h.RateLimit.Key); err != nil {
		return err
	}
	if err := add(&lm.global, "account", "account", "rate_limit_account", "this account", h.RateLimit.Account); err != nil {
		return err
	}
	for slug, tc := range h.Tools {
		if tc == nil || tc.RateLimit == nil {
			continue
		}
		var ps []*policy
		if err := add(&ps, "key/"+slug, "key/"+slug, "rate_limit_tool_key", "this API key and the tool "+slug, tc.RateLimit.Key.withDefaults()); err != nil {
			return err
		}
		if err := add(&ps, "account/"+slug, "account/"+slug, "rate_limit_tool_account", "this account and the tool "+slug, tc.RateLimit.Account.withDefaults()); err != nil {
			return err
		}
		if len(ps) > 0 {
			lm.tools[slug] = ps
		}
	}
	var auth []*policy
	if err := add(&auth, "auth", "auth-failures", "auth_failures", "failed authentications from your address", h.AuthFailureLimit); err != nil {
		return err
	}
	if len(auth) > 0 {
		lm.auth = auth[0]
	}
	if h.MaxConcurrentPerAccount > 0 {
		lm.slotKey = ledgerKey
		v, _, err := slotPool.LoadOrNew(ledgerKey, func() (caddy.Destructor, error) {
			return &accountSlots{m: map[string]int{}}, nil
		})
		if err != nil {
			lm.slotKey = ""
			return err
		}
		lm.slots, lm.maxCon = v.(*accountSlots), h.MaxConcurrentPerAccount
	}
	return nil
}

// releaseLimits gives back the pooled limiter state.
func (lm *limits) release() {
	if lm == nil {
		return
	}
	for _, k := range lm.poolKeys {
		_, _ = limiterPool.Delete(k)
	}
	lm.poolKeys = nil
	if lm.slotKey != "" {
		_, _ = slotPool.Delete(lm.slotKey)
		lm.slotKey = ""
	}
}

// accountSlots counts the generations running per account, shared by every handler (and
// config) of one ledger, so the streams of a replaced config still count.
type accountSlots struct {
	mu sync.Mutex
	m  map[string]int
}

func (*accountSlots) Destruct() error { return nil }

// acquire takes one of max places of the account; false when all are taken.
func (s *accountSlots) acquire(acct string, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[acct] >= max {
		return false
	}
	s.m[acct]++
	return true
}

func (s *accountSlots) release(acct string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.m[acct] - 1; n > 0 {
		s.m[acct] = n
	} else {
		delete(s.m, acct) // memory is bounded by the accounts running right now
	}
}

func (s *accountSlots) running(acct string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[acct]
}

// authBlocked reports whether the client address has used up its failed authentications, and
// how long until it may try again. It charges nothing: only failures are charged (authFailed).
func (lm *limits) authBlocked(addr string, t time.Time) (bool, time.Duration) {
	if lm.auth == nil {
		return false, 0
	}
	lim := lm.auth.store.peek(addr)
	if lim == nil {
		return false, 0
	}
	tokens := lim.TokensAt(t)
	if tokens >= 1 {
		return false, 0
	}
	return true, time.Duration((1 - tokens) / float64(lim.Limit()) * float64(time.Second))
}

// authFailed charges one failed authentication to the client address.
func (lm *limits) authFailed(addr string, t time.Time) {
	if lm.auth == nil {
		return
	}
	lm.auth.store.get(addr, t).AllowN(t, 1)
}

// setLimitDefaults fills in the limits the operator left out (Provision).
func (h *Handler) setLimitDefaults() {
	if h.RateLimit == nil {
		h.RateLimit = &RateLimits{}
	}
	if h.RateLimit.Key == nil {
		l := defaultKeyLimit
		h.RateLimit.Key = &l
	}
	if h.RateLimit.Account == nil {
		l := defaultAccountLimit
		h.RateLimit.Account = &l
	}
	if h.AuthFailureLimit == nil {
		l := defaultAuthFailureLimit
		h.AuthFailureLimit = &l
	}
	h.RateLimit.Key = h.RateLimit.Key.withDefaults()
	h.RateLimit.Account = h.RateLimit.Account.withDefaults()
	h.AuthFailureLimit = h.AuthFailureLimit.withDefaults()
	if h.MaxConcurrentPerAccount == 0 {
		h.MaxConcurrentPerAccount = defaultMaxConcurrentPerAccount
	}
	if h.MaxInFlight == 0 {
		h.MaxInFlight = defaultMaxInFlight
	}
	if h.QueueSize == 0 {
		h.QueueSize = defaultQueueSize
	}
	if h.QueueTimeout == 0 {
		h.QueueTimeout = caddy.Duration(defaultQueueTimeout)
	}
	if h.BodyReadTimeout == 0 {
		h.BodyReadTimeout = caddy.Duration(defaultBodyReadTimeout)
	}
}

// validateLimits rejects limits that cannot work, naming the field.
func (h *Handler) validateLimits() error {
	if h.RateLimit != nil {
		if err := h.RateLimit.Key.validate("rate_limit key", true); err != nil {
			return err
		}
		if err := h.RateLimit.Account.validate("rate_limit account", true); err != nil {
			return err
		}
	}
	if err := h.AuthFailureLimit.validate("auth_failure_limit", true); err != nil {
		return err
	}
	for name, v := range map[string]int{
		"max_concurrent_per_account": h.MaxConcurrentPerAccount,
		"max_in_flight":              h.MaxInFlight,
		"queue_size":                 h.QueueSize,
	} {
		if v < -1 {
			return fmt.Errorf("textgen: %s: %d is neither a positive number nor -1 (off)", name, v)
		}
	}
	if h.QueueTimeout < 0 || h.BodyReadTimeout < 0 {
		return fmt.Errorf("textgen: queue_timeout and body_read_timeout must not be negative")
	}
	return nil
}

// limitRate counts the request against ps (nil: none) and answers 429 rate_limited when one
// of them is used up. The RateLimit headers of every limit counted so far go on the response.
func (g *generation) limitRate(ps []*policy) bool {
	if len(ps) == 0 {
		return true
	}
	var ids [2]string
	for i, p := range ps {
		if p.byAccount {
			ids[i] = g.acct.ID
		} else {
			ids[i] = g.key.ID
		}
	}
	states := g.states[g.nstates : g.nstates+len(ps)]
	denied, wait := take(limitNow(), ps, ids[:len(ps)], states)
	if denied >= 0 {
		p := ps[denied]
		setRateHeaders(g.w.Header(), []limitState{{p: p, remaining: 0, reset: wait}})
		metrics.rejections.WithLabelValues(p.reason).Inc()
		e := newError(http.StatusTooManyRequests, "rate_limited", "",
			fmt.Sprintf("too many requests for %s: the limit is %s; no credit was charged; retry in %d s",
				p.subject, p.limit.describe(), ceilSeconds(wait)))
		e.RetryAfter = time.Duration(ceilSeconds(wait)) * time.Second
		g.errKind = p.reason
		g.fail(e)
		return false
	}
	g.nstates += len(ps)
	setRateHeaders(g.w.Header(), g.states[:g.nstates])
	return true
}

// takeSlot takes one of the account's concurrent places, or answers 429
// too_many_concurrent_requests.
func (g *generation) takeSlot() bool {
	lm := g.h.lim
	if lm.slots == nil {
		return true
	}
	if lm.slots.acquire(g.acct.ID, lm.maxCon) {
		g.slotHeld = true
		return true
	}
	hdr := g.w.Header()
	hdr.Set("RateLimit-Policy", `"concurrency";q=`+strconv.Itoa(lm.maxCon)+`;qu="concurrent-requests"`)
	hdr.Set("RateLimit", `"concurrency";r=0`)
	metrics.rejections.WithLabelValues("concurrency").Inc()
	e := newError(http.StatusTooManyRequests, "too_many_concurrent_requests", "",
		fmt.Sprintf("this account already runs %d generations, the most it may run at once; no credit was charged; retry when one has finished", lm.maxCon))
	e.RetryAfter = time.Second
	g.errKind = "concurrency"
	g.fail(e)
	return false
}

// authGate refuses a client address that has used up its failed authentications (429
// rate_limited), before its key is looked up. addr is the address to charge a failure to.
func (h *Handler) authGate(w http.ResponseWriter, r *http.Request) (addr string, refused *apiError) {
	if h.lim == nil || h.lim.auth == nil {
		return "", nil
	}
	addr = clientip.Key(r)
	blocked, wait := h.lim.authBlocked(addr, limitNow())
	if !blocked {
		return addr, nil
	}
	p := h.lim.auth
	setRateHeaders(w.Header(), []limitState{{p: p, remaining: 0, reset: wait}})
	metrics.rejections.WithLabelValues(p.reason).Inc()
	e := newError(http.StatusTooManyRequests, "rate_limited", "",
		fmt.Sprintf("too many requests with an invalid API key from your address (the limit is %s); retry in %d s",
			p.limit.describe(), ceilSeconds(wait)))
	e.RetryAfter = time.Duration(ceilSeconds(wait)) * time.Second
	return addr, e
}

// authFailed charges a failed authentication to addr (from authGate).
func (h *Handler) authFailed(addr string) {
	if addr != "" && h.lim != nil {
		h.lim.authFailed(addr, limitNow())
	}
}

// describe is the limit in words: "60 per 1m, at most 20 at once".
func (l *RateLimit) describe() string {
	s := strconv.Itoa(l.Requests) + " per " + fmtWindow(time.Duration(l.Window))
	if l.Burst != l.Requests {
		s += ", at most " + strconv.Itoa(l.Burst) + " at once"
	}
	return s
}

// fmtWindow writes a window the way a Caddyfile would ("1m", "1h", "30s").
func fmtWindow(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	default:
		return d.String()
	}
}

// timeoutBody notes whether reading the request body hit the read deadline.
type timeoutBody struct {
	io.ReadCloser
	timedOut bool
}

func (b *timeoutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.timedOut {
		var ne net.Error
		b.timedOut = errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	}
	return n, err
}

// readBody reads the request body within BodyReadTimeout: a client that sends it slower gets
// 408 request_timeout instead of holding a connection and a handler open.
func (g *generation) readBody() (*bytes.Buffer, *apiError) {
	d := time.Duration(g.h.BodyReadTimeout)
	if d <= 0 {
		return readBody(g.r, g.h.MaxBodyBytes)
	}
	rc := http.NewResponseController(g.w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return readBody(g.r, g.h.MaxBodyBytes) // the connection cannot take deadlines
	}
	// Cleared at once: after the body, the server reads on in the background to notice a
	// client that goes away, and that read must not time out mid-stream.
	defer rc.SetReadDeadline(time.Time{})
	tb := &timeoutBody{ReadCloser: g.r.Body}
	g.r.Body = tb
	buf, e := readBody(g.r, g.h.MaxBodyBytes)
	if e != nil && tb.timedOut {
		return nil, newError(http.StatusRequestTimeout, "request_timeout", "",
			fmt.Sprintf("the request body did not arrive within %s; no credit was charged", fmtWindow(d)))
	}
	return buf, e
}
