package operator

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddy-textgen/textgen/ledger"
)

// Payments: GET /textgen/payments, POST /textgen/payments/{reference}/resolve and
// POST /textgen/payments/{reference}/refund. A paid Checkout Session the webhook could not credit
// (another amount, an unknown package or account) is kept in the ledger; these routes are the
// operator's to-do list of them, the refunds and disputes the ledger applied, and a refund.

func (adminAPI) listPayments(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	q := r.URL.Query()
	openOnly := true
	if s := q.Get("all"); s != "" {
		all, err := strconv.ParseBool(s)
		if err != nil {
			return badRequest("all: %q is neither true nor false", s)
		}
		openOnly = !all
	}
	limit, err := limitFromQuery(r, "payments")
	if err != nil {
		return err
	}
	ps, err := store.UnmatchedPayments(r.Context(), openOnly, limit)
	if err != nil {
		return ledgerError(err, "listing unmatched payments")
	}
	if ps == nil {
		ps = []ledger.UnmatchedPayment{}
	}
	rs, err := store.ListReversals(r.Context(), "", "", limit)
	if err != nil {
		return ledgerError(err, "listing refunds and disputes")
	}
	return writeAdminJSON(w, http.StatusOK, paymentList{Payments: ps, OpenOnly: openOnly, Reversals: rs})
}

// refund asks My Account of the ledger, which holds the Stripe key, to refund a purchase through
// Stripe's API; the ledger takes the credits off through the path of Stripe's refund events,
// once, by the refund's id (so the event that follows changes nothing).
func (adminAPI) refund(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req refundRequest
	if err := decodeAdminJSON(r, &req, true); err != nil {
		return err
	}
	ref := r.PathValue("reference")
	acct := ""
	if pay, err := store.PaymentOf(r.Context(), ref); err == nil {
		acct = pay.AccountID
	}
	var res ledger.ReversalResult
	detail := fmt.Sprintf("refund of %s, %d cents (0: all that is left)", ref, req.AmountCents)
	err := audited(r.Context(), store, "refund", acct, detail, req.Reason, func() (err error) {
		res, err = Refund(r.Context(), store, ref, req.AmountCents, req.Reason)
		return err
	})
	if err != nil {
		return err
	}
	return writeAdminJSON(w, http.StatusOK, res)
}

func (adminAPI) resolvePayment(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req resolvePaymentRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	note := strings.TrimSpace(req.Note)
	if note == "" {
		return badRequest("note is required: say what was done (credited by hand, refunded); it stays in the ledger")
	}
	ref := r.PathValue("reference")
	p, repeated, err := store.ResolveUnmatchedPayment(r.Context(), ref, note)
	if err != nil {
		return ledgerError(err, "resolving unmatched payment %s", ref)
	}
	return writeAdminJSON(w, http.StatusOK, resolvedPayment{Payment: p, Repeated: repeated})
}
