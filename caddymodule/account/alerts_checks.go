package account

import "context"

// checkAlertCrossings runs, every lowBalanceEvery, the checks that raise alerts off every
// request's path: the low-balance check when the area sends no e-mail (with e-mail, the mail
// sender runs it and raises the alert with the e-mail).
func (a *app) checkAlertCrossings(ctx context.Context) {
	if a.mail == nil {
		a.checkLowBalances(ctx)
	}
}
