package caddymodule

import (
	"net/http"
	"strconv"

	"github.com/caddy-textgen/textgen/ledger"
)

type balanceDoc struct {
	AccountID string `json:"account_id"`
	Mode      string `json:"mode"`
	Available int64  `json:"available"`
	Balance   int64  `json:"balance"`
	// KeyID is the key's id; KeyBudget what is left of its budgets (keylimits.go), only for a
	// key that has one.
	KeyID     string        `json:"key_id"`
	KeyBudget *keyBudgetDoc `json:"key_budget,omitempty"`
	// Expiring is what of the live credits expires when, soonest first; absent when none do.
	Expiring  []ledger.ExpiringCredits `json:"expiring,omitempty"`
	RequestID string                   `json:"request_id"`
}

// serveBalance answers GET /api/v1/balance for the account of the X-API-Key: the credits of the
// key's mode (live or test).
func (h *Handler) serveBalance(w http.ResponseWriter, r *http.Request, reqID string, store handlerLedger) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, reqID, errMethodNotAllowedGET, -1)
		return
	}
	kc, e := h.checkKey(store, w, r, reqID, true)
	if e != nil {
		writeError(w, reqID, e, kc.available)
		return
	}
	doc := balanceDoc{AccountID: kc.acct.ID, Mode: string(kc.key.Mode), Available: kc.available, Balance: kc.balance,
		KeyID: kc.key.ID, KeyBudget: newKeyBudgetDoc(kc.key, now()), Expiring: kc.expiring, RequestID: reqID}
	w.Header().Set("X-Credits-Used", "0")
	w.Header().Set("X-Credits-Remaining", strconv.FormatInt(doc.Available, 10))
	writeJSON(w, r, reqID, http.StatusOK, doc)
}
