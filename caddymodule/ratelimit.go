package caddymodule

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
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

// Defaults of the limits (docs/OPERATING.md, "Limits and monitoring").
var (
	defaultKeyLimit         = RateLimit{Requests: 60, Window: caddy.Duration(time.Minute), Burst: 20}
	defaultAccountLimit     = RateLimit{Requests: 120, Window: caddy.Duration(time.Minute)}
	defaultAuthFailureLimit = RateLimit{Requests: 30, Window: caddy.Duration(time.Minute)}
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

// The limiter state lives in package-level usage pools, keyed by the limits store, the ledger
// (whose keys and accounts the limits count) and the limit, so a config reload that keeps a limit
// keeps its counts: a reload cannot be used to reset them. A changed limit starts afresh. With a
// Redis limits store the counts live in Redis (and survive a restart); the pooled buckets then
// hold only the fallback's memory.
var limiterPool = caddy.NewUsagePool()

// pooledBuckets are the buckets of one limit in limiterPool.
type pooledBuckets struct{ *ratelimit.Buckets }

func (pooledBuckets) Destruct() error { return nil }

// limit is the limit in the form the limiter takes. Called on a limit with its defaults.
func (l *RateLimit) limit() ratelimit.Limit {
	return ratelimit.Limit{Requests: l.Requests, Window: time.Duration(l.Window), Burst: l.Burst}
}

// policy is one enforced limit: a name for the RateLimit headers and metrics, its buckets.
type policy struct {
	name      string // "key", "account", "key/summarizer", "auth-failures"
	byAccount bool   // counted per account, else per key (or per client address)
	reason    string // the rejection reason in metrics and logs
	limit     RateLimit
	buckets   *ratelimit.Buckets
	item      string // its RateLimit-Policy item
	subject   string // "this API key", for messages
}

func newPolicy(name, reason, subject string, l *RateLimit, buckets *ratelimit.Buckets) *policy {
	item := strconv.Quote(name) + ";q=" + strconv.Itoa(l.Requests) + ";w=" + strconv.FormatInt(l.windowSeconds(), 10)
	if l.Burst != l.Requests {
		item += ";textgen-burst=" + strconv.Itoa(l.Burst)
	}
	return &policy{name: name, byAccount: strings.HasPrefix(name, "account"), reason: reason, limit: *l, buckets: buckets, item: item, subject: subject}
}

// limitState is a policy's state after a request, for the RateLimit header.
type limitState struct {
	p *policy
	ratelimit.State
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
		cur.WriteString(strconv.Itoa(st.Remaining))
		cur.WriteString(";t=")
		cur.WriteString(strconv.FormatInt(ceilSeconds(st.Reset), 10))
	}
	hdr.Set("RateLimit-Policy", pol.String())
	hdr.Set("RateLimit", cur.String())
}

// limits is a handler's runtime limit state.
type limits struct {
	global []*policy            // key, account (either may be off)
	tools  map[string][]*policy // per tool slug, extra limits
	auth   *policy              // failed authentications per client address; nil: off
	slots  *ratelimit.Slots     // nil: no cap
	maxCon int
	// hosts counts the generations on each Ollama host across the instances sharing the
	// limits store (max_in_flight); nil without one.
	hosts    *ratelimit.Slots
	hostsKey string
	// shared is the Redis limits store; nil: limits in this process's memory.
	shared *ratelimit.Shared
	// poolKeys are the limiterPool and slotPool keys this handler holds, storeKey its share of
	// the limits store, all released in Cleanup.
	poolKeys []string
	slotKey  string
	storeKey string
}

// setupLimits resolves the limit config and joins the pooled limiter state of the ledger and
// of the limits store, if any.
func (h *Handler) setupLimits(ledgerKey string) error {
	lm := &limits{tools: map[string][]*policy{}}
	h.lim = lm
	scope := ledgerKey
	if h.LimitsStore != "" {
		s, key, err := textgenapp.LimitsStore(h.LimitsStore, h.logger.Named("limits"))
		if err != nil {
			return err
		}
		lm.shared, lm.storeKey = s, key
		scope = key + "|" + ledgerKey
	}
	acquire := func(name string, l *RateLimit) (*ratelimit.Buckets, error) {
		key := fmt.Sprintf("%s|%s|%d/%d/%d", scope, name, l.Requests, time.Duration(l.Window), l.Burst)
		v, _, err := limiterPool.LoadOrNew(key, func() (caddy.Destructor, error) {
			return pooledBuckets{ratelimit.NewShared(lm.shared, ledgerKey+"|"+name, l.limit(), 0)}, nil
		})
		if err != nil {
			return nil, err
		}
		lm.poolKeys = append(lm.poolKeys, key)
		return v.(pooledBuckets).Buckets, nil
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
		key := fmt.Sprintf("%s|%s", scope, time.Duration(h.SlotExpiry))
		slots, err := joinSlots(key, lm.shared, ledgerKey+"|accounts", time.Duration(h.SlotExpiry))
		if err != nil {
			return err
		}
		lm.slots, lm.slotKey, lm.maxCon = slots, key, h.MaxConcurrentPerAccount
	}
	if lm.shared != nil && h.MaxInFlight > 0 {
		// Hosts are counted by URL whatever the ledger: the model server is the same machine.
		key := fmt.Sprintf("%s|ollama-hosts|%s", lm.storeKey, time.Duration(h.SlotExpiry))
		hosts, err := joinSlots(key, lm.shared, "ollama-hosts", time.Duration(h.SlotExpiry))
		if err != nil {
			return err
		}
		lm.hosts, lm.hostsKey = hosts, key
	}
	return nil
}

// hostCounter counts the generations on each Ollama host in the limits store, so that
// max_in_flight holds for a host that several instances send to (backends.HostCounter).
type hostCounter struct {
	slots *ratelimit.Slots
	store string
}

func (c hostCounter) Take(ctx context.Context, host string, max int) (func(), bool) {
	slot, ok := c.slots.Acquire(ctx, host, max)
	if !ok {
		return nil, false
	}
	return slot.Release, true
}

func (c hostCounter) String() string { return c.store }

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
		leaveSlots(lm.slotKey)
		lm.slotKey = ""
	}
	if lm.hostsKey != "" {
		leaveSlots(lm.hostsKey)
		lm.hostsKey = ""
	}
	if lm.storeKey != "" {
		textgenapp.ReleaseLimitsStore(lm.storeKey)
		lm.storeKey = ""
	}
}

// setRateLimitDefaults fills in the rate limits the operator left out (Provision).
func (h *Handler) setRateLimitDefaults() {
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
}

// validateRateLimits rejects rate limits that cannot work, naming the field.
func (h *Handler) validateRateLimits() error {
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
	for slug, tc := range h.Tools {
		if tc == nil || tc.RateLimit == nil {
			continue
		}
		if err := tc.RateLimit.Key.validate("tool "+slug+": rate_limit key", false); err != nil {
			return err
		}
		if err := tc.RateLimit.Account.validate("tool "+slug+": rate_limit account", false); err != nil {
			return err
		}
	}
	return nil
}

// admission is what the limits granted a request (admit): the places it holds until it ends.
type admission struct {
	// slot is the account's concurrent place the request holds (released at the end).
	slot ratelimit.Slot
	// hostPlace is the place on the model host host, taken across the instances with the
	// limits (the zero Slot: none) until run hands it to the backend.
	hostPlace ratelimit.Slot
	host      string
	// unknownKey: the refusal is answered as if the key had not been looked up (no credits
	// remaining reported), so that nothing tells a guesser whether it was valid.
	unknownKey bool
}

// admit counts the request of c against the handler-wide limits and, when it is valid, its
// tool's limits and one of its account's concurrent places (and a place on the preferred host of
// backend for a live key with credits remaining), all or none (ratelimit.Admit: one round trip
// to a Redis limits store). A request refused by one of them costs nothing and uses up none of
// them: 429 rate_limited or too_many_concurrent_requests, the refusal it returns. The RateLimit
// headers of every limit go on the response w. What it took is filled in adm.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request, c *caller, tool *toolRuntime, backend backends.ModelServers, remaining int64, valid bool, adm *admission) (refused *apiError) {
	lm := h.lim
	var pol [ratelimit.MaxTakeAll]*policy // the key's and account's, then the tool's
	ps := append(pol[:0], lm.global...)
	var places [ratelimit.MaxPlaces]ratelimit.Place
	np := 0
	if valid {
		ps = append(ps, lm.tools[tool.Slug]...)
		if lm.slots != nil {
			places[np] = ratelimit.Place{Slots: lm.slots, ID: c.acct.ID, Max: lm.maxCon}
			np++
		}
		// The model host's place across the instances, in the same round trip: taken if free
		// (else the backend's admission waits for one), handed to the backend in run.
		if lm.hosts != nil && c.key.Mode == ledger.Live && remaining != 0 {
			if host := backend.PreferredHost(); host != "" {
				places[np] = ratelimit.Place{Slots: lm.hosts, ID: host, Max: h.MaxInFlight, Optional: true}
				np++
				adm.host = host
			}
		}
	}
	var reqs [ratelimit.MaxTakeAll]ratelimit.Request
	var got [ratelimit.MaxTakeAll]ratelimit.State
	var slots [ratelimit.MaxPlaces]ratelimit.Slot
	for i, p := range ps {
		reqs[i] = ratelimit.Request{Buckets: p.buckets, ID: c.key.ID}
		if p.byAccount {
			reqs[i].ID = c.acct.ID
		}
	}
	nr := len(ps)
	// The client address's failed authentications: a gate (charged nothing here, see
	// Handler.authFailed), so an address that guessed too often is refused even a valid key.
	if c.addr != "" {
		reqs[nr] = ratelimit.Request{Buckets: lm.auth.buckets, ID: c.addr, Peek: true}
		nr++
	}
	if nr == 0 && np == 0 {
		return nil
	}
	denied, wait := ratelimit.Admit(r.Context(), limitNow(), reqs[:nr], places[:np], got[:nr], slots[:np])
	switch {
	case denied >= nr: // the account's place (the host's is optional)
		return h.tooManyConcurrent(w)
	case denied == len(ps):
		// Answered as if the key had not been looked up: nothing tells a guesser whether it
		// was valid.
		adm.unknownKey = true
		return authLimited(w, lm.auth, wait)
	case denied >= 0:
		p := ps[denied]
		return rateLimited(w, p, wait, "too many requests for "+p.subject+": the limit is %s; no credit was charged; retry in %d s")
	}
	for j := range np {
		if places[j].Slots == lm.hosts {
			adm.hostPlace = slots[j]
		} else {
			adm.slot = slots[j]
		}
	}
	var states [ratelimit.MaxTakeAll]limitState
	for i, p := range ps {
		states[i] = limitState{p: p, State: got[i]}
	}
	setRateHeaders(w.Header(), states[:len(ps)])
	return nil
}

// rateLimited is the 429 rate_limited answer of policy p, which allows the next request after
// wait: its RateLimit headers, its rejection count, and format (with the limit in words and the
// seconds to wait) as the message.
func rateLimited(w http.ResponseWriter, p *policy, wait time.Duration, format string) *apiError {
	setRateHeaders(w.Header(), []limitState{{p: p, State: ratelimit.State{Reset: wait}}})
	metrics.rejections.WithLabelValues(p.reason).Inc()
	e := newError(http.StatusTooManyRequests, "rate_limited", "", fmt.Sprintf(format, p.limit.describe(), ceilSeconds(wait)))
	e.RetryAfter = time.Duration(ceilSeconds(wait)) * time.Second
	e.kind = p.reason
	return e
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
