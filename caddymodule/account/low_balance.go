package account

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The low-balance alert: a customer sets a number of live credits (the settings page); when the
// available credits fall below it, one e-mail is sent, and the next only after they were back
// at or above it. The sender checks every lowBalanceEvery, off every request's path; the
// ledger's NoteLowBalance decides which of several instances sends the one message.

// checkLowBalances looks at every account with an alert.
func (a *app) checkLowBalances(ctx context.Context) {
	cursor := ""
	for ctx.Err() == nil {
		accts, next, err := a.store.ListAccounts(ctx, ledger.Page{Cursor: cursor, Limit: 1000})
		if err != nil {
			a.logger.Warn("low-balance check: listing accounts", zap.Error(err))
			return
		}
		for _, acct := range accts {
			if acct.LowBalanceAlert > 0 && acct.Status == ledger.StatusActive {
				a.checkLowBalance(ctx, acct)
			}
		}
		if next == "" {
			return
		}
		cursor = next
	}
}

func (a *app) checkLowBalance(ctx context.Context, acct ledger.Account) {
	b, err := a.store.Balance(ctx, acct.ID)
	if err != nil {
		a.logger.Warn("low-balance check", zap.String("account", acct.ID), zap.Error(err))
		return
	}
	below := b.Available < acct.LowBalanceAlert
	if below == acct.LowBalanceNotified {
		return
	}
	changed, err := a.store.NoteLowBalance(ctx, acct.ID, below)
	if err != nil || !changed || !below {
		return
	}
	if err := a.queueMail(ctx, acct, "low_balance", mailData{
		Link: a.publicURL + a.prefix + "/buy", Available: b.Available, Threshold: acct.LowBalanceAlert,
	}); err != nil {
		a.logger.Error("queueing the low-balance e-mail", zap.String("account", acct.ID), zap.Error(err))
	}
}

// setLowBalanceAlert saves the customer's threshold. Credits already below it count as told:
// the first e-mail comes when they fall below it again after a purchase.
func (a *app) setLowBalanceAlert(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	v := strings.TrimSpace(r.PostFormValue("threshold"))
	n, err := strconv.ParseInt(v, 10, 64)
	if v == "" {
		n, err = 0, nil
	}
	if err != nil || n < 0 || n > 1_000_000 {
		a.settingsPage(w, r, sc, http.StatusBadRequest, "Enter a whole number of credits from 0 (no alert) to 1000000.")
		return
	}
	if _, err := a.store.SetLowBalanceAlert(r.Context(), sc.acct.ID, n); err != nil {
		a.internalError(w, r, sc, "saving the low-balance alert", err)
		return
	}
	if n > 0 {
		b, err := a.store.Balance(r.Context(), sc.acct.ID)
		if err == nil && b.Available < n {
			_, err = a.store.NoteLowBalance(r.Context(), sc.acct.ID, true)
		}
		if err != nil {
			a.internalError(w, r, sc, "saving the low-balance alert", err)
			return
		}
	}
	http.Redirect(w, r, a.prefix+"/settings?alert=1", http.StatusSeeOther)
}
