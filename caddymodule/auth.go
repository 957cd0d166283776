package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/clientip"
	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
	"github.com/caddy-textgen/textgen/ledger"
)

// keyCheck is what Handler.checkKey found out about the X-API-Key of a request.
type keyCheck struct {
	key  ledger.Key
	acct ledger.Account
	// balance and available are the credits of the key's mode; available is -1 until the key
	// is known to be valid (then X-Credits-Remaining is left out of an error answer).
	balance, available int64
	// authLimited: refused by the limit on failed authentications of the client address.
	authLimited bool
}

// checkKey authenticates a request by its X-API-Key for generate and balance: the key's format
// and checksum first (garbage never reaches the store), the client address's limit on failed
// authentications, the key, then the account and its credits. It returns the error to answer
// with, if any; a ledger failure is logged and answered as an internal error, never as a
// missing credit.
func (h *Handler) checkKey(store ledger.Store, w http.ResponseWriter, r *http.Request, reqID string) (keyCheck, *apiError) {
	kc := keyCheck{available: -1}
	presented := r.Header.Get("X-API-Key")
	if presented == "" {
		return kc, errMissingKey
	}
	addr, refused := h.authGate(w, r)
	if refused != nil {
		kc.authLimited = true
		return kc, refused
	}
	key, acct, b, err := store.LookupKeyBalance(r.Context(), presented)
	switch {
	case errors.Is(err, ledger.ErrInvalidKey) || errors.Is(err, ledger.ErrNotFound):
		h.authFailed(addr)
		return kc, errInvalidKey
	case errors.Is(err, ledger.ErrUnavailable):
		return kc, errLedgerUnavailable
	case err != nil:
		h.logger.Error("looking up key", zap.String("request_id", reqID), zap.Error(err))
		return kc, errInternal
	}
	kc.key, kc.acct = key, acct
	kc.balance, kc.available = b.Balance, b.Available
	if key.Mode == ledger.Test {
		kc.balance, kc.available = b.TestBalance, b.TestAvailable
	}
	if acct.Status == ledger.StatusDisabled {
		return kc, errAccountDisabled
	}
	return kc, nil
}

// authenticate checks the X-API-Key header and the account (see Handler.checkKey), then counts
// the request against the key's and the account's rate limits.
func (g *generation) authenticate() bool {
	kc, e := g.h.checkKey(g.store, g.w, g.r, g.id)
	g.key, g.acct, g.remaining = kc.key, kc.acct, kc.available
	if e != nil {
		if kc.authLimited {
			g.errKind = "auth_failures"
		}
		g.fail(e)
		return false
	}
	// Every request with a valid key counts against its key's and account's limits, whatever
	// its outcome; checked before the body is read, so a client over its limit costs little.
	return g.limitRate(g.h.lim.global)
}

// authBlocked reports whether the client address has used up its failed authentications, and
// how long until it may try again. It charges nothing: only failures are charged (authFailed).
func (lm *limits) authBlocked(addr string, t time.Time) (bool, time.Duration) {
	if lm.auth == nil {
		return false, 0
	}
	return lm.auth.buckets.Blocked(addr, t)
}

// authFailed charges one failed authentication to the client address.
func (lm *limits) authFailed(addr string, t time.Time) {
	if lm.auth == nil {
		return
	}
	lm.auth.buckets.Charge(addr, t)
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
	setRateHeaders(w.Header(), []limitState{{p: p, State: ratelimit.State{Reset: wait}}})
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
