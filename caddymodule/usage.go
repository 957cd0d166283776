package caddymodule

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// GET /api/v1/usage: what the caller's account (or, with a member's key, that member) spent,
// by UTC day, tool and key over a period, with the balance and each key's budgets.

const (
	usagePath = "/api/v1/usage"
	// usageDefaultDays is the period without from: the last 30 UTC days, today included.
	usageDefaultDays = 30
	// usageMaxDays bounds one period.
	usageMaxDays = 366
)

type usageDoc struct {
	AccountID string `json:"account_id"`
	// MemberID is the organisation's member whose use this is, with a member's key; the
	// usage of the account's other members is not shown to it.
	MemberID string `json:"member_id,omitempty"`
	Mode     string `json:"mode"`
	From     string `json:"from"` // first UTC day, YYYY-MM-DD
	To       string `json:"to"`   // last UTC day, included
	// Balance and Available are the account's credits of the key's mode now.
	Balance   int64          `json:"balance"`
	Available int64          `json:"available"`
	Totals    usageCounts    `json:"totals"`
	Days      []usageDayRow  `json:"days"`
	Keys      []usageKeyInfo `json:"keys"`
	RequestID string         `json:"request_id"`
}

// usageCounts are a period's figures: credits charged, generations charged, requests that held
// credits, and requests that were not charged (their hold voided).
type usageCounts struct {
	Credits     int64 `json:"credits"`
	Generations int64 `json:"generations"`
	Requests    int64 `json:"requests"`
	NotCharged  int64 `json:"not_charged"`
}

type usageDayRow struct {
	Day   string `json:"day"`
	Tool  string `json:"tool"`
	KeyID string `json:"key_id"`
	usageCounts
}

type usageKeyInfo struct {
	ID      string        `json:"id"`
	Name    string        `json:"name"`
	Last4   string        `json:"last4"`
	Revoked bool          `json:"revoked,omitempty"`
	Budget  *keyBudgetDoc `json:"budget,omitempty"`
	// BudgetTotal, BudgetDay and BudgetMonth are the key's budgets (absent: none).
	BudgetTotal int64 `json:"budget_total,omitempty"`
	BudgetDay   int64 `json:"budget_day,omitempty"`
	BudgetMonth int64 `json:"budget_month,omitempty"`
}

// serveUsage answers GET /api/v1/usage for the account of the X-API-Key, in the key's mode.
// from and to (YYYY-MM-DD, UTC, both included) choose the period; default the last 30 days.
func (h *Handler) serveUsage(w http.ResponseWriter, r *http.Request, reqID string, store handlerLedger) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, reqID, errMethodNotAllowedGET, -1)
		return
	}
	kc, e := h.checkKey(store, w, r, reqID, true)
	if e != nil {
		writeError(w, reqID, e, kc.available)
		return
	}
	from, to, e := usagePeriod(r, now())
	if e != nil {
		writeError(w, reqID, e, kc.available)
		return
	}
	ctx := r.Context()
	rows, err := store.Usage(ctx, ledger.UsageQuery{AccountID: kc.acct.ID, From: from, To: to.AddDate(0, 0, 1), ByKey: true})
	if err == nil {
		var keys []ledger.Key
		if keys, err = store.ListKeys(ctx, kc.acct.ID); err == nil {
			doc := usageOf(kc, rows, keys, from, to)
			doc.RequestID = reqID
			w.Header().Set("X-Credits-Used", "0")
			w.Header().Set("X-Credits-Remaining", strconv.FormatInt(kc.available, 10))
			writeJSON(w, r, reqID, http.StatusOK, doc)
			return
		}
	}
	h.ledgerError(w, reqID, "reading usage", err, kc.available)
}

// usagePeriod reads from and to: UTC days, both included, from not after to, at most
// usageMaxDays apart; without them the last usageDefaultDays up to today (t's UTC day).
func usagePeriod(r *http.Request, t time.Time) (from, to time.Time, e *apiError) {
	q := r.URL.Query()
	day := func(name string, def time.Time) (time.Time, *apiError) {
		v := q.Get(name)
		if v == "" {
			return def, nil
		}
		d, err := time.Parse(time.DateOnly, v)
		if err != nil {
			return time.Time{}, newError(http.StatusBadRequest, "invalid_field", name, name+" must be a UTC day as YYYY-MM-DD, such as 2026-11-30")
		}
		return d, nil
	}
	today := t.UTC().Truncate(24 * time.Hour)
	if to, e = day("to", today); e != nil {
		return
	}
	if from, e = day("from", to.AddDate(0, 0, 1-usageDefaultDays)); e != nil {
		return
	}
	switch {
	case from.After(to):
		e = newError(http.StatusBadRequest, "invalid_field", "from", "from is after to")
	case to.Sub(from) >= usageMaxDays*24*time.Hour:
		e = newError(http.StatusBadRequest, "invalid_field", "from", "a period is at most "+strconv.Itoa(usageMaxDays)+" days; ask for it in parts")
	}
	return
}

// usageOf is the usage document of the key kc for rows (by day, tool, mode and key) and the
// account's keys: the rows of kc's mode, and, for a member's key, of that member's keys alone.
func usageOf(kc keyCheck, rows []ledger.UsageRow, keys []ledger.Key, from, to time.Time) usageDoc {
	doc := usageDoc{AccountID: kc.acct.ID, Mode: string(kc.key.Mode), From: from.Format(time.DateOnly), To: to.Format(time.DateOnly),
		Balance: kc.balance, Available: kc.available, Days: []usageDayRow{}, Keys: []usageKeyInfo{}}
	member := kc.key.MemberID
	doc.MemberID = member
	mine := map[string]bool{}
	for _, k := range keys {
		if k.Mode != kc.key.Mode || (member != "" && k.MemberID != member) {
			continue
		}
		mine[k.ID] = true
		doc.Keys = append(doc.Keys, usageKeyInfo{ID: k.ID, Name: k.Name, Last4: k.Last4, Revoked: !k.Revoked.IsZero(),
			Budget: newKeyBudgetDoc(k, now()), BudgetTotal: k.BudgetTotal, BudgetDay: k.BudgetDay, BudgetMonth: k.BudgetMonth})
	}
	for _, r := range rows {
		if string(r.Mode) != doc.Mode || (member != "" && !mine[r.KeyID]) {
			continue
		}
		c := usageCounts{Credits: r.Credits, Generations: r.Settled, Requests: r.Requests, NotCharged: r.Voided}
		doc.Days = append(doc.Days, usageDayRow{Day: r.Day, Tool: r.Tool, KeyID: r.KeyID, usageCounts: c})
		doc.Totals.Credits += c.Credits
		doc.Totals.Generations += c.Generations
		doc.Totals.Requests += c.Requests
		doc.Totals.NotCharged += c.NotCharged
	}
	slices.SortFunc(doc.Keys, func(a, b usageKeyInfo) int { return strings.Compare(a.ID, b.ID) })
	return doc
}
