package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/clientip"
	"github.com/caddy-textgen/textgen/ledger"
)

// Keys with limits (ledger/keylimits.go) on the API: the refusals of a key's limits, in the
// order of a request: an expired key at authentication (auth.go), the tools and client
// addresses it may use once the request is read and before anything is held (keyLimits), its
// budgets in the hold itself (generate.go reserve, keyBudgetExhausted). None of them costs a
// credit or echoes the key.

var errKeyExpired = &apiError{Status: http.StatusUnauthorized, Code: "key_expired", Message: "the API key has expired; create a new key (or extend this one) in My Account"}

// keyLimits refuses a request its key may not make: a tool it may not call (403
// tool_not_allowed) or a client address outside its ranges (403 address_not_allowed). The
// address is the one Caddy determined (trusted proxies and their headers apply).
func keyLimits(l ledger.KeyLimits, tool *toolRuntime, r *http.Request) *apiError {
	if !l.AllowsTool(tool.Slug) {
		return newError(http.StatusForbidden, "tool_not_allowed", "tool",
			fmt.Sprintf("this API key may not call the tool %q; it may call %s (its owner can change that in My Account)", tool.Slug, strings.Join(l.AllowedTools, ", ")))
	}
	if len(l.AllowedCIDRs) > 0 {
		addr, ok := clientip.Addr(r)
		if !ok || !l.AllowsAddr(addr) {
			return newError(http.StatusForbidden, "address_not_allowed", "",
				"this API key may not be used from your address; its owner can allow more addresses in My Account")
		}
	}
	return nil
}

// keyBudgetExhausted is the 402 of a hold that its key's budget refused: the message says which
// budget and when it resets, resets_at and Retry-After say when (the total budget never resets).
func keyBudgetExhausted(err error) *apiError {
	var be *ledger.KeyBudgetError
	if !errors.As(err, &be) {
		be = &ledger.KeyBudgetError{Budget: "total"}
	}
	e := newError(http.StatusPaymentRequired, "key_budget_exhausted", "", "")
	if be.Resets.IsZero() {
		e.Message = fmt.Sprintf("this API key has spent its total budget of %d credits; its owner can raise it in My Account, or use another key", be.Limit)
		return e
	}
	period := map[string]string{"day": "daily", "month": "monthly"}[be.Budget]
	e.Message = fmt.Sprintf("this API key has spent its %s budget of %d credits; it resets at %s (UTC), or its owner can raise it in My Account",
		period, be.Limit, be.Resets.UTC().Format(time.RFC3339))
	e.ResetsAt = be.Resets.UTC().Format(time.RFC3339)
	e.RetryAfter = max(be.Resets.Sub(now()), time.Second)
	return e
}

// keyBudgetDoc is what is left of a key's budgets, in GET /api/v1/balance (only for a key that
// has a budget).
type keyBudgetDoc struct {
	Total       *int64 `json:"remaining_total,omitempty"`
	Day         *int64 `json:"remaining_day,omitempty"`
	DayResets   string `json:"day_resets_at,omitempty"`
	Month       *int64 `json:"remaining_month,omitempty"`
	MonthResets string `json:"month_resets_at,omitempty"`
}

func newKeyBudgetDoc(k ledger.Key, t time.Time) *keyBudgetDoc {
	if !k.HasBudget() {
		return nil
	}
	r := k.Remaining(t)
	d := &keyBudgetDoc{Total: r.Total, Day: r.Day, Month: r.Month}
	if r.Day != nil {
		d.DayResets = r.DayResets.Format(time.RFC3339)
	}
	if r.Month != nil {
		d.MonthResets = r.MonthResets.Format(time.RFC3339)
	}
	return d
}
