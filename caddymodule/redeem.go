package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// POST /api/v1/credits/redeem: a customer redeems an operator's code (ledger/codes.go) into the
// live credits of the key's account. A wrong code is throttled like a wrong key: it counts
// against the client address's failed authentications (and against the account's own, in the
// same limiter), and an address or account with none left is answered 429 before the code is
// looked up. Unknown, disabled, expired and used-up codes get one answer, so a guess learns
// nothing about which codes exist.

const redeemPath = "/api/v1/credits/redeem"

// maxRedeemBody is the most a redeem body may be: a code and its field, with room to spare.
const maxRedeemBody = 1024

var (
	errCodeNotRedeemable = &apiError{Status: http.StatusBadRequest, Code: "code_not_redeemable", Param: "code",
		Message: "this code cannot be redeemed: it is unknown, disabled, expired or used up; check how it was typed, or ask whoever gave it to you"}
	errCodeAlreadyRedeemed = &apiError{Status: http.StatusConflict, Code: "code_already_redeemed", Param: "code",
		Message: "this account has already redeemed this code; a code credits an account once"}
	errLiveKeyRequired = &apiError{Status: http.StatusForbidden, Code: "live_key_required",
		Message: "a code is redeemed into live credits: send a live key (tg_live_...), not a test key"}
)

// redeemDoc is the answer to a redemption.
type redeemDoc struct {
	Credits   int64  `json:"credits"`   // what the code credited
	Balance   int64  `json:"balance"`   // the account's live balance after it
	Available int64  `json:"available"` // the account's live credits available after it
	CodeID    string `json:"code_id"`
	RequestID string `json:"request_id"`
}

// serveRedeem answers POST /api/v1/credits/redeem.
func (h *Handler) serveRedeem(w http.ResponseWriter, r *http.Request, reqID string, store handlerLedger) {
	if r.Method != http.MethodPost {
		writeError(w, reqID, errMethodNotAllowedPOST, -1)
		return
	}
	kc, e := h.checkKey(store, w, r, reqID, true)
	if e != nil {
		writeError(w, reqID, e, kc.available)
		return
	}
	if kc.key.Mode != ledger.Live {
		writeError(w, reqID, errLiveKeyRequired, kc.available)
		return
	}
	acctID := "redeem|" + kc.acct.ID
	if h.lim != nil && h.lim.auth != nil {
		if blocked, wait := h.lim.auth.buckets.Blocked(r.Context(), acctID, limitNow()); blocked {
			writeError(w, reqID, redeemLimited(w, h.lim.auth, wait), kc.available)
			return
		}
	}
	code, e := h.readRedeem(w, r)
	if e != nil {
		writeError(w, reqID, e, kc.available)
		return
	}
	red, err := store.Redeem(r.Context(), kc.acct.ID, code)
	switch {
	case errors.Is(err, ledger.ErrCodeNotRedeemable):
		if h.lim != nil && h.lim.auth != nil {
			refused := h.authFailed(r.Context(), w, kc.addr)
			if _, ok, wait := h.lim.auth.buckets.Take(r.Context(), acctID, limitNow()); !ok && refused == nil {
				refused = redeemLimited(w, h.lim.auth, wait)
			}
			if refused != nil {
				writeError(w, reqID, refused, kc.available)
				return
			}
		}
		writeError(w, reqID, errCodeNotRedeemable, kc.available)
		return
	case errors.Is(err, ledger.ErrAlreadyRedeemed):
		writeError(w, reqID, errCodeAlreadyRedeemed, kc.available)
		return
	case errors.Is(err, ledger.ErrAccountDisabled):
		writeError(w, reqID, errAccountDisabled, kc.available)
		return
	case errors.Is(err, ledger.ErrUnavailable):
		writeError(w, reqID, errLedgerUnavailable, kc.available)
		return
	case err != nil:
		h.logger.Error("redeeming a code", zap.String("request_id", reqID), zap.String("account_id", kc.acct.ID), zap.Error(err))
		writeError(w, reqID, errInternal, kc.available)
		return
	}
	h.logger.Info("code redeemed", zap.String("request_id", reqID), zap.String("account_id", kc.acct.ID),
		zap.String("code_id", red.Code.ID), zap.Int64("credits", red.Entry.Amount))
	available := max(red.Balance.Available, 0)
	w.Header().Set("X-Credits-Used", "0")
	w.Header().Set("X-Credits-Remaining", strconv.FormatInt(available, 10))
	writeJSON(w, r, reqID, http.StatusOK, redeemDoc{Credits: red.Entry.Amount, Balance: red.Balance.Balance,
		Available: available, CodeID: red.Code.ID, RequestID: reqID})
}

// redeemLimited is the 429 of an account that has used up its wrong codes.
func redeemLimited(w http.ResponseWriter, p *policy, wait time.Duration) *apiError {
	return rateLimited(w, p, wait, "too many codes that cannot be redeemed for this account (the limit is %s); retry in %d s")
}

// readRedeem reads the body {"code": "..."}: one JSON object with one string field, nothing
// else.
func (h *Handler) readRedeem(w http.ResponseWriter, r *http.Request) (string, *apiError) {
	if e := checkContentType(r); e != nil {
		return "", e
	}
	buf, e := readBody(r, maxRedeemBody)
	if e != nil {
		return "", e
	}
	defer bodyPool.Put(buf)
	return parseRedeem(buf.Bytes())
}

// parseRedeem decodes a redeem body strictly, as parseGenRequest does a generate body.
func parseRedeem(body []byte) (string, *apiError) {
	if !utf8.Valid(body) {
		return "", newError(http.StatusBadRequest, "invalid_utf8", "code", "the request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err == io.EOF {
		return "", newError(http.StatusBadRequest, "invalid_json", "", `the request body is empty; send {"code": "..."}`)
	}
	if err != nil {
		return "", invalidJSON(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return "", newError(http.StatusBadRequest, "invalid_json", "", `the request body must be a JSON object: {"code": "..."}`)
	}
	var code string
	seen := false
	for dec.More() {
		if tok, err = dec.Token(); err != nil {
			return "", invalidJSON(err)
		}
		name, _ := tok.(string)
		if name != "code" {
			return "", newError(http.StatusBadRequest, "unknown_field", name, fmt.Sprintf("unknown field %q; the only field is code", name))
		}
		if seen {
			return "", newError(http.StatusBadRequest, "invalid_field", "code", `field "code" appears more than once`)
		}
		seen = true
		if tok, err = dec.Token(); err != nil {
			return "", invalidJSON(err)
		}
		s, ok := tok.(string)
		if !ok {
			return "", newError(http.StatusBadRequest, "invalid_field", "code", `field "code" must be a string`)
		}
		code = s
	}
	if _, err = dec.Token(); err != nil {
		return "", invalidJSON(err)
	}
	if _, err = dec.Token(); err != io.EOF {
		return "", newError(http.StatusBadRequest, "invalid_json", "", "unexpected data after the JSON object")
	}
	if !seen {
		return "", newError(http.StatusBadRequest, "missing_field", "code", `field "code" is required`)
	}
	return code, nil
}
