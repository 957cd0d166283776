package account

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The checks that raise alerts off every request's path, run by the alert sender every
// lowBalanceEvery: a key that has spent 80% or all of one of its budgets (in its day, month, or
// for good), and a member who has reached their monthly cap. They read only the accounts with
// an endpoint subscribed to those events (ledger.AlertAccounts), and the ledger's note of each
// occurrence (NoteAlert) makes one instance of several raise it, once per period. With no
// e-mail, the low-balance check runs here too (with e-mail, the mail sender runs it).

// alertCheckPage is how many accounts a check reads at a time.
const alertCheckPage = 1000

func (a *app) checkAlertCrossings(ctx context.Context) {
	if a.mail == nil {
		a.checkLowBalances(ctx)
	}
	a.eachAlertAccount(ctx, "key budgets", []string{ledger.AlertKeyBudget80, ledger.AlertKeyBudget100}, a.checkKeyBudgets)
	a.eachAlertAccount(ctx, "member caps", []string{ledger.AlertMemberCapReached}, a.checkMemberCaps)
}

// eachAlertAccount calls check for every account with an endpoint subscribed to kinds; a
// failure is logged, and tried again in the next run.
func (a *app) eachAlertAccount(ctx context.Context, what string, kinds []string, check func(context.Context, string) error) {
	after := ""
	for ctx.Err() == nil {
		accts, err := a.store.AlertAccounts(ctx, kinds, after, alertCheckPage)
		if err != nil {
			a.logger.Warn("alert check of "+what+": listing the accounts", zap.Error(err))
			return
		}
		for _, id := range accts {
			if err := check(ctx, id); err != nil && ctx.Err() == nil {
				a.logger.Warn("alert check of "+what, zap.String("account", id), zap.Error(err))
			}
		}
		if len(accts) < alertCheckPage {
			return
		}
		after = accts[len(accts)-1]
	}
}

// noteAndRaise raises kind once for the occurrence key, until until (zero: for good).
func (a *app) noteAndRaise(ctx context.Context, acct, kind, key string, until time.Time, data any) error {
	changed, err := a.store.NoteAlert(ctx, acct, kind+" "+key, until)
	if err != nil || !changed {
		return err
	}
	return a.raiseAlert(ctx, acct, kind, key, data)
}

// checkKeyBudgets raises key.budget_80 and key.budget_100 for the account's keys whose spending
// in a budget's period has crossed them. The occurrence is the key, the budget, its period and
// its limit: a new day or month, or a changed budget, can raise them again.
func (a *app) checkKeyBudgets(ctx context.Context, acct string) error {
	keys, err := a.store.ListKeys(ctx, acct)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	t := now()
	for _, k := range keys {
		if !k.Revoked.IsZero() || !k.HasBudget() {
			continue
		}
		r := k.Remaining(t)
		for _, b := range []struct {
			name         string
			limit        int64
			left         *int64
			start, until time.Time
		}{
			{ledger.BudgetTotal, k.BudgetTotal, r.Total, time.Time{}, time.Time{}},
			{ledger.BudgetDay, k.BudgetDay, r.Day, r.DayResets.AddDate(0, 0, -1), r.DayResets},
			{ledger.BudgetMonth, k.BudgetMonth, r.Month, r.MonthResets.AddDate(0, -1, 0), r.MonthResets},
		} {
			if b.limit <= 0 || b.left == nil {
				continue
			}
			used := b.limit - *b.left
			for _, th := range []struct {
				kind string
				pct  int64
			}{{ledger.AlertKeyBudget80, 80}, {ledger.AlertKeyBudget100, 100}} {
				if used*100 < b.limit*th.pct {
					continue
				}
				occ := fmt.Sprintf("%s %s %d %d", k.ID, b.name, b.limit, b.start.Unix())
				data := map[string]any{"key_id": k.ID, "key_name": k.Name, "budget": b.name, "limit": b.limit, "used": used}
				if !b.until.IsZero() {
					data["period_start"], data["resets"] = b.start.UTC().Format(time.RFC3339), b.until.UTC().Format(time.RFC3339)
				}
				if err := a.noteAndRaise(ctx, acct, th.kind, occ, b.until, data); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkMemberCaps raises member.cap_reached for the organisation's members who have used their
// monthly cap, once a month per member and cap.
func (a *app) checkMemberCaps(ctx context.Context, org string) error {
	ms, err := a.store.ListMembers(ctx, org)
	if errors.Is(err, ledger.ErrNotOrganisation) || errors.Is(err, ledger.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	t := now()
	for _, m := range ms {
		if m.Pending || m.MonthlyCap <= 0 || m.Used < m.MonthlyCap {
			continue
		}
		occ := fmt.Sprintf("%s %s %d", m.MemberID, ledger.MonthOf(t), m.MonthlyCap)
		if err := a.noteAndRaise(ctx, org, ledger.AlertMemberCapReached, occ, ledger.MemberCapResets(t),
			map[string]any{"member_id": m.MemberID, "email": m.Email, "monthly_cap": m.MonthlyCap, "used": m.Used, "month": ledger.MonthOf(t)}); err != nil {
			return err
		}
	}
	return nil
}
