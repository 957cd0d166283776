package account

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The low-balance alert: a customer sets a number of live credits (the settings page); when the
// available credits fall below it, one e-mail is sent, and the next only after they were back
// at or above it. The sender checks every lowBalanceEvery, off every request's path; the
// ledger's NoteLowBalance decides which of several instances sends the one message.

// lowBalancePage is how many crossed alerts the check asks the ledger for at a time.
const lowBalancePage = 1000

// checkLowBalances acts on the accounts whose alert was crossed since it was last noted, which
// the ledger finds (LowBalanceChanges) without this instance reading every account. Noting an
// account takes it off that list, so each page starts with the accounts not yet seen, and the
// check asks again while pages come back full. An account that stays on the list (noting it
// failed, or its credits crossed back meanwhile) is not tried twice in one run, and a page with
// no account new to this run ends it: the loop ends even while the ledger refuses every note
// (a full page of accounts whose notes keep failing then hides those after it until a run
// that notes them).
func (a *app) checkLowBalances(ctx context.Context) {
	seen := map[string]bool{}
	failed, lastErr := 0, error(nil)
	defer func() {
		if failed > 0 && ctx.Err() == nil {
			a.logger.Warn("low-balance check: crossings not noted; tried again in the next check",
				zap.Int("accounts", failed), zap.Error(lastErr))
		}
	}()
	for ctx.Err() == nil {
		changes, err := a.store.LowBalanceChanges(ctx, lowBalancePage)
		if err != nil {
			a.logger.Warn("low-balance check: listing crossed alerts", zap.Error(err))
			return
		}
		fresh := 0
		for _, c := range changes {
			if seen[c.Account.ID] {
				continue
			}
			seen[c.Account.ID] = true
			fresh++
			if err := a.checkLowBalance(ctx, c); err != nil {
				failed, lastErr = failed+1, err
			}
		}
		if len(changes) < lowBalancePage || fresh == 0 {
			return
		}
	}
}

// checkLowBalance notes one crossing; of several instances that see it, the one whose note
// changed the flag queues the e-mail, and only for a fall below the alert. It returns the
// error of the note, not of the e-mail (logged here: the crossing is noted, so it is not
// mailed again).
func (a *app) checkLowBalance(ctx context.Context, c ledger.LowBalanceChange) error {
	below := c.Below()
	changed, err := a.store.NoteLowBalance(ctx, c.Account.ID, below)
	if err != nil {
		return fmt.Errorf("account %s: %w", c.Account.ID, err)
	}
	if !changed || !below {
		return nil
	}
	// The event's id is the account's and the time of the note: one per crossing, raised only by
	// the instance whose note changed the flag.
	_ = a.raiseAlert(ctx, c.Account.ID, ledger.AlertBalanceLow, c.Account.ID+"\x00"+now().UTC().Format(time.RFC3339Nano),
		map[string]any{"available": c.Available, "threshold": c.Account.LowBalanceAlert})
	if a.mail == nil {
		return nil
	}
	if err := a.queueMail(ctx, c.Account, "low_balance", mailData{
		Link: a.publicURL + a.prefix + "/buy", Available: c.Available, Threshold: c.Account.LowBalanceAlert,
	}); err != nil {
		a.logger.Error("queueing the low-balance e-mail", zap.String("account", c.Account.ID), zap.Error(err))
	}
	return nil
}

// setLowBalanceAlert saves the customer's threshold. Credits already below it count as told:
// the first e-mail comes when they fall below it again after a purchase.
func (a *app) setLowBalanceAlert(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	if sc.role != ledger.RoleOwner {
		a.errorPage(w, r, sc, http.StatusForbidden, "Not allowed", "Only an owner of the organisation sets its low-balance alert.")
		return
	}
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
