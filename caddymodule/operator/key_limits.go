package operator

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/caddymodule/catalog"
	"github.com/caddy-textgen/textgen/ledger"
)

// A key's limits and rolls: POST /textgen/accounts/{id}/keys/{kid}/limits (what is sent is
// changed, what is left out kept) and POST .../keys/{kid}/roll (a new secret for the same key,
// the old one kept for a grace period).

// keyLimitsRequest changes a key's settings; a field left out (null) keeps its value, an empty
// list or 0 removes the limit, "" removes an expiry.
type keyLimitsRequest struct {
	Name         *string   `json:"name"`
	Note         *string   `json:"note"`
	Expires      *string   `json:"expires"` // an RFC 3339 time or a duration from now; "": never
	BudgetTotal  *int64    `json:"budget_total"`
	BudgetDay    *int64    `json:"budget_day"`
	BudgetMonth  *int64    `json:"budget_month"`
	AllowedTools *[]string `json:"allowed_tools"`
	AllowedCIDRs *[]string `json:"allowed_cidrs"`
}

// rollKeyRequest rolls a key; Grace is a duration of 0 to 7 days ("24h", "2d"; default 0).
type rollKeyRequest struct {
	Grace string `json:"grace"`
}

// keyLimitsView are a key's limits, use and roll as the admin API and the CLI show them.
type keyLimitsView struct {
	Note         string              `json:"note,omitempty"`
	BudgetTotal  int64               `json:"budget_total,omitempty"`
	BudgetDay    int64               `json:"budget_day,omitempty"`
	BudgetMonth  int64               `json:"budget_month,omitempty"`
	AllowedTools []string            `json:"allowed_tools,omitempty"`
	AllowedCIDRs []string            `json:"allowed_cidrs,omitempty"`
	Usage        ledger.KeyUsage     `json:"usage"`
	Remaining    ledger.KeyRemaining `json:"remaining"`
	Rolled       time.Time           `json:"rolled,omitzero"`
	// PreviousLast4 and GraceUntil: a roll's previous secret, working until GraceUntil.
	PreviousLast4 string    `json:"previous_last4,omitempty"`
	GraceUntil    time.Time `json:"grace_until,omitzero"`
}

func newKeyLimitsView(k ledger.Key) keyLimitsView {
	v := keyLimitsView{Note: k.Note, BudgetTotal: k.BudgetTotal, BudgetDay: k.BudgetDay, BudgetMonth: k.BudgetMonth,
		AllowedTools: k.AllowedTools, AllowedCIDRs: k.AllowedCIDRs, Usage: k.Usage, Remaining: k.Remaining(now()),
		Rolled: k.Rolled}
	if t := now(); t.Before(k.GraceUntil) {
		v.PreviousLast4, v.GraceUntil = k.PreviousLast4, k.GraceUntil
	}
	return v
}

// checkTools refuses a tool slug the catalog does not have (a configured tool of the handler's
// own is one of the catalog's slugs too).
func checkTools(tools []string) error {
	cat := catalog.Default()
	for _, t := range tools {
		if _, ok := cat.Lookup(t); !ok {
			return fmt.Errorf("%q is not a tool; the tools are listed by GET /api/v1/tools", t)
		}
	}
	return nil
}

// keyOfAccount returns the account's key kid, answering 404 for either missing.
func keyOfAccount(r *http.Request, store operatorLedger, id, kid string) (ledger.Key, error) {
	keys, err := store.ListKeys(r.Context(), id)
	if err != nil {
		return ledger.Key{}, accountError(err, id, "listing the keys of account %s", id)
	}
	for _, k := range keys {
		if k.ID == kid {
			return k, nil
		}
	}
	return ledger.Key{}, caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("account %s has no key %s", id, kid)}
}

// applyKeyLimits is k's settings with the fields of req that were sent.
func applyKeyLimits(k ledger.Key, req keyLimitsRequest, t time.Time) (ledger.KeySettings, error) {
	set := ledger.KeySettings{Name: k.Name, Expires: k.Expires, Limits: k.KeyLimits}
	if req.Name != nil {
		set.Name = strings.TrimSpace(*req.Name)
	}
	if req.Note != nil {
		set.Limits.Note = strings.TrimSpace(*req.Note)
	}
	if req.Expires != nil {
		set.Expires = time.Time{}
		if s := strings.TrimSpace(*req.Expires); s != "" {
			exp, err := parseExpiry(s, t)
			if err != nil {
				return set, badRequest("expires: %v", err)
			}
			set.Expires = exp
		}
	}
	for _, b := range []struct {
		v   *int64
		dst *int64
		n   string
	}{{req.BudgetTotal, &set.Limits.BudgetTotal, "budget_total"}, {req.BudgetDay, &set.Limits.BudgetDay, "budget_day"},
		{req.BudgetMonth, &set.Limits.BudgetMonth, "budget_month"}} {
		if b.v != nil {
			if *b.v < 0 {
				return set, badRequest("%s: a budget is a number of credits, 0 for none", b.n)
			}
			*b.dst = *b.v
		}
	}
	if req.AllowedTools != nil {
		if err := checkTools(*req.AllowedTools); err != nil {
			return set, badRequest("allowed_tools: %v", err)
		}
		set.Limits.AllowedTools = *req.AllowedTools
	}
	if req.AllowedCIDRs != nil {
		set.Limits.AllowedCIDRs = *req.AllowedCIDRs
	}
	return set, nil
}

func (adminAPI) setKeyLimits(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req keyLimitsRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	id, kid := r.PathValue("id"), r.PathValue("kid")
	k, err := keyOfAccount(r, store, id, kid)
	if err != nil {
		return err
	}
	set, err := applyKeyLimits(k, req, now())
	if err != nil {
		return err
	}
	err = audited(r.Context(), store, "key.limits", id, "key "+kid, "", func() (err error) {
		k, err = store.UpdateKey(r.Context(), id, kid, set)
		return err
	})
	if err != nil {
		return keyError(err, id, kid, "changing the limits of key %s of account %s", kid, id)
	}
	return writeAdminJSON(w, http.StatusOK, newKeyView(k))
}

func (adminAPI) rollKey(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req rollKeyRequest
	if err := decodeAdminJSON(r, &req, true); err != nil {
		return err
	}
	var grace time.Duration
	if s := strings.TrimSpace(req.Grace); s != "" {
		d, err := caddy.ParseDuration(s)
		if err != nil || d < 0 || d > ledger.MaxKeyRollGrace {
			return badRequest("grace: %q is not a duration from 0 to 7 days (\"0\", \"24h\", \"7d\")", s)
		}
		grace = d
	}
	id, kid := r.PathValue("id"), r.PathValue("kid")
	k, err := keyOfAccount(r, store, id, kid)
	if err != nil {
		return err
	}
	// The operator acts for the account's own login: a key an organisation's member made is
	// theirs to roll, and its new secret theirs alone to see (ledger.Allowed). Revoking it, or
	// changing its limits, stays open to the operator.
	if !ledger.Allowed(ledger.RoleOwner, ledger.KeyMember(k) == id, "", ledger.ActKeyRoll) {
		return caddy.APIError{HTTPStatus: http.StatusForbidden, Err: fmt.Errorf(
			"key %s of account %s belongs to its member %s: only they can roll it (in My Account), so that its secret is shown to them alone; revoke it instead if it may have leaked",
			kid, id, k.MemberID)}
	}
	var full string
	err = audited(r.Context(), store, "key.roll", id, fmt.Sprintf("key %s, grace %s", kid, grace), "", func() (err error) {
		full, k, err = store.RollKey(r.Context(), id, kid, grace)
		return err
	})
	if err != nil {
		return keyError(err, id, kid, "rolling key %s of account %s", kid, id)
	}
	return writeAdminJSON(w, http.StatusOK, createdKey{Key: full, keyView: newKeyView(k)})
}

// keyError answers a failed change of key kid: 409 for a revoked key.
func keyError(err error, id, kid, format string, args ...any) error {
	if errors.Is(err, ledger.ErrAlreadyRevoked) {
		return caddy.APIError{HTTPStatus: http.StatusConflict, Err: fmt.Errorf("key %s of account %s is revoked", kid, id)}
	}
	return ledgerError(err, format, args...)
}
