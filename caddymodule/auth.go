package caddymodule

import (
	"context"
	"errors"
	"net/http"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/clientip"
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
// authentications, then the key with its account and credits (one ledger call). It returns the
// error to answer with, if any: an unavailable ledger is 503 ledger_unavailable, any other
// ledger failure is logged and answered as an internal error, never as a missing credit.
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
		h.authFailed(r.Context(), addr)
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

// authenticate checks the X-API-Key header and the account (see Handler.checkKey).
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
	return true
}

// authGate refuses a client address that has used up its failed authentications (429
// rate_limited), before its key is looked up. addr is the address to charge a failure to.
func (h *Handler) authGate(w http.ResponseWriter, r *http.Request) (addr string, refused *apiError) {
	if h.lim == nil || h.lim.auth == nil {
		return "", nil
	}
	addr = clientip.Key(r)
	// Blocked charges nothing: only failures are charged (authFailed).
	blocked, wait := h.lim.auth.buckets.Blocked(r.Context(), addr, limitNow())
	if !blocked {
		return addr, nil
	}
	return addr, rateLimited(w, h.lim.auth, wait,
		"too many requests with an invalid API key from your address (the limit is %s); retry in %d s")
}

// authFailed charges a failed authentication to addr (from authGate; "" when the limit is off).
func (h *Handler) authFailed(ctx context.Context, addr string) {
	if addr != "" {
		h.lim.auth.buckets.Charge(ctx, addr, limitNow())
	}
}
