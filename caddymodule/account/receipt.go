package account

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/caddy-textgen/textgen/ledger"
)

// A receipt of each purchase: the page a customer keeps or prints for their records. It is
// made from the ledger's purchase entry (the credits and the amount the webhook booked), so it
// shows what was credited, whatever the browser saw. With invoice_creation Stripe also sends
// an invoice; the receipt says so.
//
// Money that flowed back is on the receipt too, from the ledger's payment and reversals of the
// purchase: each refund (id, date, amount, credits taken back; one that failed says so) with
// the total refunded and whether that is all of the amount paid, and each dispute with its
// state. A receipt that said "paid" of money returned would be wrong in the customer's books.

// checkoutReason is how webhook.go names a purchase's package in its ledger entry.
const checkoutReason = "Stripe Checkout, package "

type receiptData struct {
	Purchase ledger.Entry
	Package  string
	Invoice  bool // Stripe was asked to create an invoice too
	// Refunds and Disputes of the purchase, newest first.
	Refunds  []ledger.Reversal
	Disputes []ledger.Reversal
	// RefundedCents is what the refunds that did not fail returned; Refund is "full" when
	// that is all of the amount paid, "partial" when it is less, "" when nothing was.
	RefundedCents int64
	Refund        string
	// Signed: the site signs receipts, and the page links the signed one (receipt_signed.go).
	Signed bool
}

func (a *app) receipt(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	ref := r.PathValue("reference")
	// Another account's purchase is "not found" too: a reference says nothing about who paid. So
	// is a reference the ledger refuses (empty, too long, not UTF-8): no purchase can have it.
	e, err := a.store.Purchase(r.Context(), sc.acct.ID, ref)
	if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidArgument) {
		a.errorPage(w, r, sc, http.StatusNotFound, "Receipt not found", "You have no purchase with this payment reference.")
		return
	}
	if err != nil {
		a.internalError(w, r, sc, "reading the purchase", err)
		return
	}
	pkg := e.Reason
	if id, ok := strings.CutPrefix(e.Reason, checkoutReason); ok {
		pkg = "Package " + id
	}
	d := receiptData{Purchase: e, Package: pkg, Invoice: a.invoiceCreation, Signed: a.receiptSigner() != nil}
	rs, err := a.reversalsOf(r.Context(), sc.acct.ID, ref)
	if err != nil {
		a.internalError(w, r, sc, "reading the refunds and disputes of a purchase", err)
		return
	}
	for _, rv := range rs {
		switch rv.Kind {
		case ledger.ReversalRefund:
			d.Refunds = append(d.Refunds, rv)
			if rv.Status != ledger.RefundFailed {
				d.RefundedCents += rv.AmountCents
			}
		case ledger.ReversalDispute:
			d.Disputes = append(d.Disputes, rv)
		}
	}
	switch {
	case d.RefundedCents <= 0:
	case d.RefundedCents >= e.AmountCents:
		d.Refund = "full"
	default:
		d.Refund = "partial"
	}
	p := sc.page("Receipt", "dashboard")
	p.Data = d
	a.render(w, r, http.StatusOK, "receipt", p)
}

// maxReversals is the most refunds and disputes of an account that My Account reads at once
// (the ledger's most for one list).
const maxReversals = 1000

// reversalsOf returns the refunds and disputes of the account's purchase reference (all of
// them: reference ""), newest first.
func (a *app) reversalsOf(ctx context.Context, acct, reference string) ([]ledger.Reversal, error) {
	rs, err := a.store.ListReversals(ctx, acct, "", maxReversals)
	if err != nil || reference == "" {
		return rs, err
	}
	var out []ledger.Reversal
	for _, rv := range rs {
		if rv.Reference == reference {
			out = append(out, rv)
		}
	}
	return out, nil
}
