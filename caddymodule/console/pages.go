package console

import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The pages: Overview, Accounts (search), an Account, Audit. Each reads the ledger through the
// console's roles and renders one template.

type dayCount struct {
	Day               string
	Requests, Settled int64
	Bar               int // percent of the busiest day, for the bar
}

type toolCount struct {
	Tool     string
	Requests int64
}

type overviewData struct {
	Health          []healthLine // health.go
	Days            []dayCount
	Charged         []chargedDay // charged.go
	Tools           []toolCount
	OpenDisputes    []ledger.Reversal
	OpenUnmatched   []ledger.UnmatchedPayment
	RecentRefunds   []ledger.Reversal
	OperatorsNumber int
	Revenue         revenueData
}

// overviewDays is how many days of generations the overview shows.
const overviewDays = 14

func (a *app) overview(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	ctx := r.Context()
	var d overviewData
	t := now().UTC()
	today := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	from, chargedFrom := today.AddDate(0, 0, -(overviewDays-1)), today.AddDate(0, 0, -(chargedDays-1))
	// One read serves both: the error rates' days (chargedDays) cover the generations' days.
	rows, err := a.store.Usage(ctx, ledger.UsageQuery{From: chargedFrom})
	if err != nil {
		a.internalError(w, r, sc, "read usage", err)
		return
	}
	byDay, byTool := map[string]*dayCount{}, map[string]int64{}
	for i := range overviewDays {
		day := from.AddDate(0, 0, i).Format("2006-01-02")
		byDay[day] = &dayCount{Day: day}
	}
	d.Charged = chargedRows(rows, chargedFrom)
	for _, u := range rows {
		if u.Mode != ledger.Live || u.Day < from.Format("2006-01-02") {
			continue
		}
		if dc := byDay[u.Day]; dc != nil {
			dc.Requests += u.Requests
			dc.Settled += u.Settled
		}
		byTool[cmp.Or(u.Tool, "(none)")] += u.Requests
	}
	var most int64 = 1
	for _, dc := range byDay {
		most = max(most, dc.Requests)
	}
	for i := overviewDays - 1; i >= 0; i-- {
		dc := byDay[from.AddDate(0, 0, i).Format("2006-01-02")]
		dc.Bar = int(dc.Requests * 100 / most)
		d.Days = append(d.Days, *dc)
	}
	for tool, n := range byTool {
		d.Tools = append(d.Tools, toolCount{tool, n})
	}
	slices.SortFunc(d.Tools, func(x, y toolCount) int {
		return cmp.Or(cmp.Compare(y.Requests, x.Requests), strings.Compare(x.Tool, y.Tool))
	})
	disputes, err := a.store.ListReversals(ctx, "", ledger.ReversalDispute, 1000)
	if err != nil {
		a.internalError(w, r, sc, "list disputes", err)
		return
	}
	for _, dp := range disputes {
		if dp.Status == ledger.DisputeOpen {
			d.OpenDisputes = append(d.OpenDisputes, dp)
		}
	}
	if d.OpenUnmatched, err = a.store.UnmatchedPayments(ctx, true, 100); err != nil {
		a.internalError(w, r, sc, "list unmatched payments", err)
		return
	}
	if d.RecentRefunds, err = a.store.ListReversals(ctx, "", ledger.ReversalRefund, 10); err != nil {
		a.internalError(w, r, sc, "list refunds", err)
		return
	}
	mail, err := a.store.ListMail(ctx, outboxReadLimit)
	if err != nil {
		a.internalError(w, r, sc, "list the outbox", err)
		return
	}
	d.Health = a.health(ctx, mail)
	if d.Revenue, err = a.revenue(ctx); err != nil {
		a.internalError(w, r, sc, "read the revenue", err)
		return
	}
	a.render(w, r, http.StatusOK, "overview", sc, page{Title: "Overview", Nav: "overview", Data: d})
}

type accountsData struct {
	Query    string
	Accounts []ledger.Account
	// Keys are the keys a key hint found, with their accounts' e-mail.
	Keys    []keyMatch
	Next    string
	Message string
}

// accounts finds accounts by e-mail, account id or key (keys.go), or lists them.
func (a *app) accounts(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	ctx := r.Context()
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if ledger.ContainsKeySecret(q) {
		// Typed into the address bar or kept from an old link: the secret is already in this
		// request's URL, so the page moves to an address without it, and searches nothing.
		http.Redirect(w, r, a.prefix+"/accounts?refused=secret", http.StatusSeeOther)
		return
	}
	d := accountsData{Query: q}
	if r.URL.Query().Get("refused") == "secret" {
		d.Message = secretRefused
	}
	var acct ledger.Account
	var err error
	switch {
	case q == "":
		d.Accounts, d.Next, err = a.store.ListAccounts(ctx, ledger.Page{Cursor: r.URL.Query().Get("after"), Limit: 50})
		if errors.Is(err, ledger.ErrInvalidArgument) {
			d.Accounts, d.Next, err = a.store.ListAccounts(ctx, ledger.Page{Limit: 50})
		}
	case strings.HasPrefix(q, "acct_"):
		acct, err = a.store.GetAccount(ctx, q)
	case strings.Contains(q, "@"):
		acct, err = a.store.GetAccountByEmail(ctx, q)
	default:
		var only string
		d.Keys, only, d.Message, err = a.findKeys(ctx, q)
		if only != "" {
			acct.ID = only
		}
	}
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		d.Message = "No account has " + q + "."
	case err != nil:
		a.internalError(w, r, sc, "find accounts", err)
		return
	case acct.ID != "":
		http.Redirect(w, r, a.prefix+"/accounts/"+acct.ID, http.StatusSeeOther)
		return
	}
	a.render(w, r, http.StatusOK, "accounts", sc, page{Title: "Accounts", Nav: "accounts", Data: d})
}

// secretRefused is what the Accounts page says to a search that holds a key's secret.
const secretRefused = "That holds an API key, a secret: the console neither searches by it nor shows it. " +
	"Search by the key's hint (tg_live_…abcd), its last 4 characters or its id (key_…), and ask the customer to roll the key."

// searchAccounts takes the Accounts page's search, sent as a form so that what was typed reaches
// no URL (the browser's history, an access log) before the server has read it: input that holds
// a key's secret is refused and never shown again; any other search goes on to the Accounts
// page's address, which a bookmark or the back button may keep.
func (a *app) searchAccounts(w http.ResponseWriter, r *http.Request, sc *sessionCtx, _ action) {
	q := strings.TrimSpace(r.PostFormValue("q"))
	if ledger.ContainsKeySecret(q) {
		a.logger.Info("console: refused a search that holds a key's secret", zap.String("operator", sc.op.ID))
		a.render(w, r, http.StatusBadRequest, "accounts", sc, page{Title: "Accounts", Nav: "accounts",
			Data: accountsData{Message: secretRefused}})
		return
	}
	to := a.prefix + "/accounts"
	if q != "" {
		to += "?q=" + url.QueryEscape(q)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

type accountData struct {
	Account   ledger.Account
	Balance   ledger.Balance
	Debt      int64
	Keys      []keyRow // key_limits.go
	Purchases []ledger.Entry
	History   []ledger.Entry
	Payments  []ledger.Payment
	Audit     []ledger.AuditRecord
	// Members are an organisation's members and invitations (none for a personal account),
	// with what each member's keys took last UTC month (members.go).
	Members            []memberRow
	LastMonth          string
	Done               string
	CanSupport, CanOwn bool
	// The credit forms' ids: sent twice, a form credits once.
	GrantFormID, AdjustFormID string
	GrantLimit                int64
}

func (a *app) account(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	ctx := r.Context()
	id := r.PathValue("id")
	var d accountData
	var err error
	if d.Account, err = a.store.GetAccount(ctx, id); err != nil {
		a.accountMissing(w, r, sc, id, err)
		return
	}
	if d.Balance, err = a.store.Balance(ctx, id); err == nil {
		var keys []ledger.Key
		keys, err = a.store.ListKeys(ctx, id)
		d.Keys = keyRows(keys, now())
	}
	if err == nil {
		d.Purchases, err = a.store.Purchases(ctx, id, 50)
	}
	if err == nil {
		d.History, _, err = a.store.History(ctx, id, ledger.Page{Limit: 50})
	}
	if err == nil {
		d.Payments, err = a.store.AccountPayments(ctx, id, 100)
	}
	if err == nil {
		d.Members, d.LastMonth, err = a.members(ctx, id)
	}
	if err == nil {
		d.Audit, _, err = a.store.ListAudit(ctx, ledger.AuditQuery{AccountID: id, Page: ledger.Page{Limit: 100}})
	}
	if err != nil {
		a.internalError(w, r, sc, "read the account", err)
		return
	}
	d.Debt = max(-d.Balance.Balance, 0)
	d.GrantFormID, d.AdjustFormID = newFormID(), newFormID()
	d.CanSupport, d.CanOwn = allowed(sc.op.Role, actGrant), allowed(sc.op.Role, actRefund)
	if sc.op.Role != ledger.OperatorOwner {
		d.GrantLimit = a.supportGrantLimit
	}
	if act := action(r.URL.Query().Get("done")); actionNames[act] != "" {
		d.Done = string(act)
	}
	a.render(w, r, http.StatusOK, "account", sc, page{Title: d.Account.Email, Nav: "accounts", Data: d})
}

type auditData struct {
	Records []ledger.AuditRecord
	Next    string
}

func (a *app) audit(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	recs, next, err := a.store.ListAudit(r.Context(), ledger.AuditQuery{Page: ledger.Page{Cursor: r.URL.Query().Get("before"), Limit: 100}})
	if errors.Is(err, ledger.ErrInvalidArgument) {
		a.errorPage(w, r, sc, http.StatusBadRequest, "Bad request", "This page of the audit log does not exist.")
		return
	}
	if err != nil {
		a.internalError(w, r, sc, "read the audit log", err)
		return
	}
	a.render(w, r, http.StatusOK, "audit", sc, page{Title: "Audit log", Nav: "audit", Data: auditData{Records: recs, Next: next}})
}
