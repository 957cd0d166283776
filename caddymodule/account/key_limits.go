package account

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/catalog"
	"github.com/caddy-textgen/textgen/caddymodule/internal/keytext"
	"github.com/caddy-textgen/textgen/ledger"
)

// A key's limits and its roll in My Account: GET and POST /keys/settings?id= (a form per key:
// name, note, budgets, allowed tools and addresses, expiry) and POST /keys/roll (a new secret
// for the same key, shown once, the old one kept for the grace period the owner picks).

// keySettingsData is the settings page of one key, with what the owner typed when it is shown
// again with an error.
type keySettingsData struct {
	Key                                 ledger.Key
	Name, Note                          string
	BudgetTotal, BudgetDay, BudgetMonth string
	Tools, CIDRs, Expires               string
	Remaining                           ledger.KeyRemaining
	AllTools                            []string
	GraceChoices                        []graceChoice
	// MayRoll: the key is the session's own, the only keys it may roll (ledger.ActKeyRoll).
	MayRoll bool
}

type graceChoice struct {
	Value, Label string
	grace        time.Duration
}

// rollGraces are the grace periods the owner may pick for a roll.
var rollGraces = []graceChoice{{"0", "none (it stops now)", 0}, {"1h", "1 hour", time.Hour},
	{"24h", "1 day", 24 * time.Hour}, {"168h", "7 days", 7 * 24 * time.Hour}}

func newKeySettingsData(k ledger.Key) keySettingsData {
	num := func(v int64) string {
		if v == 0 {
			return ""
		}
		return strconv.FormatInt(v, 10)
	}
	d := keySettingsData{Key: k, Name: k.Name, Note: k.Note, BudgetTotal: num(k.BudgetTotal), BudgetDay: num(k.BudgetDay),
		BudgetMonth: num(k.BudgetMonth), Tools: strings.Join(k.AllowedTools, ", "), CIDRs: strings.Join(k.AllowedCIDRs, "\n"),
		Remaining: k.Remaining(time.Now()), AllTools: catalog.Default().Slugs(), GraceChoices: rollGraces}
	if !k.Expires.IsZero() {
		d.Expires = k.Expires.UTC().Format("2006-01-02")
	}
	return d
}

// ownKey finds the account's unrevoked key id for a settings or roll request that the session
// may do (act), answering 404 for another account's key, one that does not exist or one the
// session may not see, and 403 for one it sees but may not act on (keyFor).
func (a *app) ownKey(w http.ResponseWriter, r *http.Request, sc *sessionCtx, id string, act ledger.Action) (ledger.Key, bool) {
	k, ok := a.keyFor(w, r, sc, id, act)
	if ok && !k.Revoked.IsZero() {
		a.errorPage(w, r, sc, http.StatusConflict, "Key revoked", "This key is revoked: its limits can no longer change.")
		return k, false
	}
	return k, ok
}

func (a *app) keySettings(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	k, ok := a.ownKey(w, r, sc, r.URL.Query().Get("id"), ledger.ActKeyLimits)
	if !ok {
		return
	}
	p := sc.page("Key limits", "keys")
	d := newKeySettingsData(k)
	d.MayRoll = sc.mayKey(k, nil, ledger.ActKeyRoll)
	p.Data = d
	a.render(w, r, http.StatusOK, "key_settings", p)
}

// parseKeySettings reads the settings form; the message is for the owner.
func parseKeySettings(r *http.Request) (ledger.KeySettings, string) {
	var set ledger.KeySettings
	set.Name = strings.TrimSpace(r.PostFormValue("name"))
	set.Limits.Note = strings.TrimSpace(r.PostFormValue("note"))
	if set.Name == "" || len([]rune(set.Name)) > maxKeyName || strings.ContainsFunc(set.Name, isControl) {
		return set, "Give the key a name of at most 60 characters of plain text."
	}
	if len(set.Limits.Note) > 500 {
		return set, "The note must be at most 500 characters."
	}
	for _, b := range []struct {
		field, label string
		dst          *int64
	}{{"budget_total", "total", &set.Limits.BudgetTotal}, {"budget_day", "daily", &set.Limits.BudgetDay}, {"budget_month", "monthly", &set.Limits.BudgetMonth}} {
		s := strings.TrimSpace(r.PostFormValue(b.field))
		if s == "" {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 || v > 1<<40 {
			return set, fmt.Sprintf("The %s budget must be a whole number of credits (leave it empty for none).", b.label)
		}
		*b.dst = v
	}
	cat := catalog.Default()
	for _, t := range strings.FieldsFunc(r.PostFormValue("tools"), func(c rune) bool { return c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t' }) {
		if _, ok := cat.Lookup(t); !ok {
			return set, fmt.Sprintf("“%s” is not one of the tools; leave the field empty to allow every tool.", t)
		}
		set.Limits.AllowedTools = append(set.Limits.AllowedTools, t)
	}
	set.Limits.AllowedCIDRs = strings.Fields(strings.ReplaceAll(r.PostFormValue("cidrs"), ",", " "))
	if s := strings.TrimSpace(r.PostFormValue("expires")); s != "" {
		d, err := time.Parse("2006-01-02", s)
		if err != nil {
			return set, "The expiry must be a date (YYYY-MM-DD), or empty for none."
		}
		set.Expires = d.UTC()
	}
	return set, ""
}

func (a *app) saveKeySettings(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	k, ok := a.ownKey(w, r, sc, r.PostFormValue("id"), ledger.ActKeyLimits)
	if !ok {
		return
	}
	set, msg := parseKeySettings(r)
	if msg == "" && set.Name != k.Name {
		if _, ok := a.keyFor(w, r, sc, k.ID, ledger.ActKeyRename); !ok {
			return
		}
	}
	if msg == "" {
		var err error
		_, err = a.store.UpdateKey(r.Context(), sc.acct.ID, k.ID, set)
		switch {
		case errors.Is(err, ledger.ErrInvalidArgument):
			msg = "These limits cannot be saved: check that every address range is a CIDR such as 203.0.113.0/24 or 2001:db8::/32, and that the expiry is in the future."
		case err != nil:
			a.internalError(w, r, sc, "saving key limits", err)
			return
		}
	}
	if msg != "" {
		d := newKeySettingsData(k)
		d.MayRoll = sc.mayKey(k, nil, ledger.ActKeyRoll)
		d.Name, d.Note, d.Tools, d.CIDRs, d.Expires = r.PostFormValue("name"), r.PostFormValue("note"), r.PostFormValue("tools"), r.PostFormValue("cidrs"), r.PostFormValue("expires")
		d.BudgetTotal, d.BudgetDay, d.BudgetMonth = r.PostFormValue("budget_total"), r.PostFormValue("budget_day"), r.PostFormValue("budget_month")
		p := sc.page("Key limits", "keys")
		p.Error, p.Data = msg, d
		a.render(w, r, http.StatusBadRequest, "key_settings", p)
		return
	}
	a.logger.Info("API key limits changed", zap.String("account", sc.acct.ID), zap.String("key_id", k.ID))
	http.Redirect(w, r, a.prefix+"/keys?saved="+url.QueryEscape(k.ID), http.StatusSeeOther)
}

func (a *app) rollKey(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	k, ok := a.ownKey(w, r, sc, r.PostFormValue("id"), ledger.ActKeyRoll)
	if !ok {
		return
	}
	var grace time.Duration
	found := false
	for _, g := range rollGraces {
		if g.Value == r.PostFormValue("grace") {
			grace, found = g.grace, true
		}
	}
	if !found {
		a.errorPage(w, r, sc, http.StatusBadRequest, "Choose a grace period", "Choose how long the old secret keeps working.")
		return
	}
	full, rk, err := a.store.RollKey(r.Context(), sc.acct.ID, k.ID, grace)
	if err != nil {
		a.internalError(w, r, sc, "rolling key", err)
		return
	}
	a.logger.Info("API key rolled", zap.String("account", sc.acct.ID), zap.String("key_id", k.ID), zap.Duration("grace", grace))
	d, err := a.keysData(r, sc)
	if err != nil {
		a.internalError(w, r, sc, "listing keys", err)
		return
	}
	d.Created, d.FullKey, d.Rolled = &rk, full, true
	p := sc.page("Your key's new secret", "keys")
	p.Data = d
	a.render(w, r, http.StatusCreated, "key_created", p)
}

// budgetLeft says what is left of a key's budgets, for the keys table ("" when it has none).
func budgetLeft(k ledger.Key) string { return keytext.BudgetLeft(k, time.Now()) }
