package account

import (
	"errors"
	"net/http"
	"strings"

	"github.com/caddy-textgen/textgen/ledger"
)

// A receipt of each purchase: the page a customer keeps or prints for their records. It is
// made from the ledger's purchase entry (the credits and the amount the webhook booked), so it
// shows what was credited, whatever the browser saw. With invoice_creation Stripe also sends
// an invoice; the receipt says so.

// checkoutReason is how webhook.go names a purchase's package in its ledger entry.
const checkoutReason = "Stripe Checkout, package "

type receiptData struct {
	Purchase ledger.Entry
	Package  string
	Invoice  bool // Stripe was asked to create an invoice too
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
	p := sc.page("Receipt", "dashboard")
	p.Data = receiptData{Purchase: e, Package: pkg, Invoice: a.invoiceCreation}
	a.render(w, r, http.StatusOK, "receipt", p)
}
