package console

import (
	"net/http"

	"github.com/caddy-textgen/textgen/ledger"
)

// The Payments page: refunds and disputes of every account, and the paid sessions that
// credited nothing (resolved with `caddy textgen payments resolve`).

type paymentsData struct {
	Refunds, Disputes []ledger.Reversal
	Unmatched         []ledger.UnmatchedPayment
	TopUps            []ledger.TopUp
}

// paymentsListed is how many of each kind the page shows, newest first.
const paymentsListed = 200

func (a *app) payments(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	ctx := r.Context()
	var d paymentsData
	var err error
	if d.Refunds, err = a.store.ListReversals(ctx, "", ledger.ReversalRefund, paymentsListed); err == nil {
		if d.Disputes, err = a.store.ListReversals(ctx, "", ledger.ReversalDispute, paymentsListed); err == nil {
			if d.Unmatched, err = a.store.UnmatchedPayments(ctx, false, paymentsListed); err == nil {
				d.TopUps, err = a.store.ListTopUps(ctx, "", paymentsListed)
			}
		}
	}
	if err != nil {
		a.internalError(w, r, sc, "list payments", err)
		return
	}
	a.render(w, r, http.StatusOK, "payments", sc, page{Title: "Payments", Nav: "payments", Data: d})
}
