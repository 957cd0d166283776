package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

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
	// expiring is what of the live credits expires when (ledger.Balance.Expiring); none for a
	// test key.
	expiring []ledger.ExpiringCredits
	// addr is the client address the limit on failed authentications counts ("" when off).
	addr string
}

// checkKey authenticates a request by its X-API-Key for generate and balance: the key's format
// and checksum first (garbage never reaches the store), then the key with its account and
// credits (one ledger call). A failed authentication is charged to the client address; past its
// limit the answer is 429, whatever the key. With gate, an address past that limit is refused
// before its key is looked up; without (generate), the caller checks it with its other limits
// (admit), in the same round trip. It returns the error to answer with, if any: an unavailable
// ledger is 503 ledger_unavailable, any other ledger failure is logged and answered as an
// internal error, never as a missing credit.
func (h *Handler) checkKey(store handlerLedger, w http.ResponseWriter, r *http.Request, reqID string, gate bool) (keyCheck, *apiError) {
	kc := keyCheck{available: -1}
	presented, e := presentedKey(r)
	h.warnKeyInAccessLog(r)
	maskKeyHeaders(r)
	if e != nil {
		return kc, e
	}
	if h.lim != nil && h.lim.auth != nil {
		kc.addr = clientip.Key(r)
	}
	if gate {
		if refused := h.authGate(w, r, kc.addr); refused != nil {
			return kc, refused
		}
	}
	key, acct, b, err := store.LookupKeyBalance(r.Context(), presented)
	switch {
	case errors.Is(err, ledger.ErrInvalidKey) || errors.Is(err, ledger.ErrNotFound):
		if refused := h.authFailed(r.Context(), w, kc.addr); refused != nil {
			return kc, refused
		}
		return kc, errInvalidKey
	case errors.Is(err, ledger.ErrKeyExpired):
		// Counted like an invalid key: an expired key is no better a credential.
		if refused := h.authFailed(r.Context(), w, kc.addr); refused != nil {
			return kc, refused
		}
		return kc, errKeyExpired
	case errors.Is(err, ledger.ErrUnavailable):
		return kc, errLedgerUnavailable
	case err != nil:
		h.logger.Error("looking up key", zap.String("request_id", reqID), zap.Error(err))
		return kc, errInternal
	}
	// The log names the secret that was presented: after a roll, the old one in its grace
	// period has last 4 characters of its own (public, like the prefix).
	key.Last4 = presented[len(presented)-4:]
	kc.key, kc.acct = key, acct
	kc.balance, kc.available, kc.expiring = b.Balance, b.Available, b.Expiring
	if key.Mode == ledger.Test {
		kc.balance, kc.available, kc.expiring = b.TestBalance, b.TestAvailable, nil
	}
	// An account in debt (a refund or dispute took back credits already spent) has a negative
	// available figure in the ledger; the API says it has none left (the balance shows the debt).
	kc.available = max(kc.available, 0)
	if acct.Status == ledger.StatusDisabled {
		return kc, errAccountDisabled
	}
	return kc, nil
}

// caller is who calls: the key and its account, and the client address its failed
// authentications count against ("" when that limit is off).
type caller struct {
	key  ledger.Key
	acct ledger.Account
	addr string
}

// authenticate checks the X-API-Key header and the account (see Handler.checkKey). It fills
// in c, the caller as far as it was found (the log names a disabled account's key), and returns
// the credits available to report (-1 while the key is unknown) and its refusal, if any. (The
// caller is filled in rather than returned: a key and an account returned by value would be
// copied through the frames of every stream's connection goroutine, whose stack every open
// stream keeps.)
func (h *Handler) authenticate(store handlerLedger, w http.ResponseWriter, r *http.Request, reqID string, c *caller) (int64, *apiError) {
	kc, e := h.checkKey(store, w, r, reqID, false)
	c.key, c.acct, c.addr = kc.key, kc.acct, kc.addr
	return kc.available, e
}

// authGate refuses a client address that has used up its failed authentications (429
// rate_limited) before its key is looked up ("" addr: the limit is off). It charges nothing.
func (h *Handler) authGate(w http.ResponseWriter, r *http.Request, addr string) (refused *apiError) {
	if addr == "" {
		return nil
	}
	blocked, wait := h.lim.auth.buckets.Blocked(r.Context(), addr, limitNow())
	if !blocked {
		return nil
	}
	return authLimited(w, h.lim.auth, wait)
}

// authFailed charges a failed authentication to addr ("" when the limit is off). An address
// that had none left is answered 429 rate_limited instead of 401 (and charged nothing more).
func (h *Handler) authFailed(ctx context.Context, w http.ResponseWriter, addr string) (refused *apiError) {
	if addr == "" {
		return nil
	}
	if _, ok, wait := h.lim.auth.buckets.Take(ctx, addr, limitNow()); !ok {
		return authLimited(w, h.lim.auth, wait)
	}
	return nil
}

// authLimited is the 429 of the limit on failed authentications p, with wait until the next.
func authLimited(w http.ResponseWriter, p *policy, wait time.Duration) *apiError {
	return rateLimited(w, p, wait, "too many requests with an invalid API key from your address (the limit is %s); retry in %d s")
}

// presentedKey is the API key of a request: its X-API-Key header, or its Authorization: Bearer
// header (what OpenAI-style SDKs send). Both with different keys is a 400: which one to charge
// would be a guess.
func presentedKey(r *http.Request) (string, *apiError) {
	key := r.Header.Get("X-API-Key")
	bearer, hasBearer := bearerToken(r.Header.Get("Authorization"))
	switch {
	case hasBearer && key != "" && bearer != key:
		return "", errConflictingKeys
	case hasBearer && bearer != "":
		return bearer, nil
	case key != "":
		return key, nil
	}
	return "", errMissingKey
}

// bearerToken is the token of an Authorization header of the Bearer scheme (RFC 6750; the
// scheme's name is case-insensitive); ok is false for any other header.
func bearerToken(h string) (token string, ok bool) {
	const scheme = "bearer "
	if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	return strings.TrimSpace(h[len(scheme):]), true
}

// maskKeyHeaders leaves in the request's headers only what a log may show of the keys it carries
// (maskKey), once they have been read: the handlers after this one, and whatever reads the
// request's headers later, never see the secret.
func maskKeyHeaders(r *http.Request) {
	if vs := r.Header.Values("X-API-Key"); len(vs) > 0 {
		masked := make([]string, len(vs))
		for i, v := range vs {
			masked[i] = maskKey(v)
		}
		r.Header["X-Api-Key"] = masked
	}
	if vs := r.Header.Values("Authorization"); len(vs) > 0 {
		masked := make([]string, len(vs))
		for i, v := range vs {
			if token, ok := bearerToken(v); ok {
				masked[i] = v[:len("bearer")] + " " + maskKey(token)
			} else {
				masked[i] = "REDACTED"
			}
		}
		r.Header["Authorization"] = masked
	}
}

// maskKey is what a log may show of a presented key: its prefix and last 4 characters, as the
// log line of a generation shows a key ("tg_live_...abcd"); nothing of a value that is not
// shaped like a key (it may be another secret).
func maskKey(v string) string {
	v = strings.TrimSpace(v)
	for _, prefix := range [...]string{"tg_live_", "tg_test_"} {
		if len(v) >= len(prefix)+12 && strings.HasPrefix(v, prefix) {
			return prefix + "..." + v[len(v)-4:]
		}
	}
	return "REDACTED"
}
