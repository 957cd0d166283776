package account

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

const (
	recentRequests = 20
	historyWindow  = 300 // entries read to find the latest requests
	// recentPayments is how many of the account's latest payments are read for the ones not
	// paid (pending or failed), recentReversals how many refunds and disputes are listed.
	recentPayments  = 20
	recentReversals = 20
)

// requestRow is one generate request as the dashboard lists it.
type requestRow struct {
	ID      string // the request id (X-Request-Id), to match the customer's own logs
	Time    time.Time
	Tool    string
	Mode    ledger.Mode
	Credits int64
	Status  string // "charged", "not charged", "in progress"
	Detail  string // the void reason
}

type dashboardData struct {
	Balance   ledger.Balance
	Requests  []requestRow
	Purchases []ledger.Entry
	// Unpaid are the latest payments that are pending (a delayed payment method: nothing is
	// credited until it succeeds) or failed; Reversals the latest refunds and disputes.
	Unpaid     []ledger.Payment
	Reversals  []ledger.Reversal
	Usage      usageSummary
	ByKey      []keyUsage // usage_by_key.go
	TestTarget int64
	CanBuy     bool
	// ByMember is an organisation's use this month by member (org_usage.go); nil elsewhere.
	ByMember []ledger.Membership
	// Prices are the tools that do not cost 1 credit a request.
	Prices []textgenapp.ToolPrice
}

func (a *app) dashboard(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	ctx := r.Context()
	bal, err := a.store.Balance(ctx, sc.acct.ID)
	if err != nil {
		a.internalError(w, r, sc, "reading balance", err)
		return
	}
	hist, _, err := a.store.History(ctx, sc.acct.ID, ledger.Page{Limit: historyWindow})
	if err != nil {
		a.internalError(w, r, sc, "reading history", err)
		return
	}
	purchases, err := a.store.Purchases(ctx, sc.acct.ID, 20)
	if err != nil {
		a.internalError(w, r, sc, "reading purchases", err)
		return
	}
	unpaid, reversals, err := a.moneyBack(ctx, sc.acct.ID)
	if err != nil {
		a.internalError(w, r, sc, "reading payments, refunds and disputes", err)
		return
	}
	first := now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 1-chartDays)
	usage, err := a.store.Usage(ctx, ledger.UsageQuery{AccountID: sc.acct.ID, From: first})
	if err != nil {
		a.internalError(w, r, sc, "reading usage", err)
		return
	}
	byKey, err := a.usageByKey(ctx, sc, first)
	if err != nil {
		a.internalError(w, r, sc, "reading usage by key", err)
		return
	}
	p := sc.page("Dashboard", "dashboard")
	q := r.URL.Query()
	if n, err := strconv.Atoi(q.Get("refilled")); err == nil && q.Has("refilled") {
		if n > 0 {
			p.Flash = fmt.Sprintf("Added %d test credits.", n)
		} else {
			p.Flash = fmt.Sprintf("Your test credits are full already (%d).", a.testCredits)
		}
	}
	byMember, err := a.usageByMember(ctx, sc)
	if err != nil {
		a.internalError(w, r, sc, "reading usage by member", err)
		return
	}
	p.Data = dashboardData{Balance: bal, Requests: latestRequests(hist, recentRequests), Purchases: purchases,
		Unpaid: unpaid, Reversals: reversals,
		Usage: summarizeUsage(usage, first), ByKey: byKey, TestTarget: a.testCredits, CanBuy: a.stripe != nil, ByMember: byMember,
		Prices: a.toolPrices()}
	a.render(w, r, http.StatusOK, "dashboard", p)
}

// moneyBack returns the account's latest payments that are not paid (pending or failed) and its
// latest refunds and disputes, for the dashboard.
func (a *app) moneyBack(ctx context.Context, acct string) ([]ledger.Payment, []ledger.Reversal, error) {
	ps, err := a.store.AccountPayments(ctx, acct, recentPayments)
	if err != nil {
		return nil, nil, err
	}
	var unpaid []ledger.Payment
	for _, p := range ps {
		if p.Status != ledger.PaymentPaid {
			unpaid = append(unpaid, p)
		}
	}
	rs, err := a.store.ListReversals(ctx, acct, "", recentReversals)
	return unpaid, rs, err
}

// latestRequests turns ledger entries (newest first) into the newest n requests: a hold opens
// a request, a settle charges it, a void releases it.
func latestRequests(entries []ledger.Entry, n int) []requestRow {
	rows := map[string]*requestRow{}
	for _, e := range entries {
		if e.RequestID == "" {
			continue
		}
		row := rows[e.RequestID]
		if row == nil {
			row = &requestRow{ID: e.RequestID, Time: e.Time, Tool: e.Tool, Mode: e.Mode, Status: "in progress"}
			rows[e.RequestID] = row
		}
		switch e.Kind {
		case ledger.KindHold:
			row.Time = e.Time // the request's start
		case ledger.KindSettle:
			row.Status, row.Credits = "charged", -e.Amount
		case ledger.KindVoid:
			row.Status, row.Detail = "not charged", e.Reason
		}
	}
	out := make([]requestRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func (a *app) refillTestCredits(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	n, _, err := a.store.RefillTestCredits(r.Context(), sc.acct.ID, a.testCredits)
	if err != nil {
		a.internalError(w, r, sc, "refilling test credits", err)
		return
	}
	http.Redirect(w, r, fmt.Sprintf("%s/?refilled=%d", a.prefix, n), http.StatusSeeOther)
}
