package account

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v82"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// Buying credits: the buy page lists the packages; "Buy" creates a Stripe Checkout Session
// (client_reference_id = the account id, metadata = the package) and sends the browser to
// Stripe's payment page. Credits are added only by the webhook (webhook.go), never by the
// return page: a browser can come back without paying, or pay and never come back.

// toolPrices are the tools of this ledger that do not cost 1 credit a request; none where no
// textgen handler of the config says so.
func (a *app) toolPrices() []textgenapp.ToolPrice {
	if a.prices == nil {
		return nil
	}
	return a.prices()
}

// AnyExpires reports whether a package's credits expire.
func (d buyData) AnyExpires() bool {
	for _, p := range d.Packages {
		if p.Expires > 0 {
			return true
		}
	}
	return false
}

type buyData struct {
	Packages []Package
	// Prices are the tools that do not cost 1 credit a request.
	Prices  []textgenapp.ToolPrice
	Enabled bool
	Refused bool // refuse_disputed_purchases: the account has a dispute
	// AccountID names the account to its operator when buying is off (noBuying).
	AccountID string
	// TopUp: automatic top-up is on (topup.go); the page links to it.
	TopUp bool
}

// noBuying says what to do where this service sells no credits: ask its operator, naming the
// account and the command that credits it (on a site of one's own, the reader is the operator).
func noBuying(acct string) string {
	return fmt.Sprintf("This service does not sell credits online. Ask its operator to add live credits to your account %s; "+
		"the operator's command is: caddy textgen credits grant --account %s --credits <n>. Test keys work without them, on your free test credits.", acct, acct)
}

// With refuse_disputed_purchases, an account with an open or lost dispute (chargeback) buys
// nothing: its bank took or may take a payment back, and another purchase could go the same
// way. The buy page says so instead of offering packages, and a form sent anyway is refused
// with 403 before Stripe is asked for anything. A dispute won (or refunds) does not count.

// disputeRefusal is the message of a refused purchase.
const disputeRefusal = "Buying credits is not available for this account while a payment of it is disputed with your bank (a chargeback). " +
	"Please contact the operator of this service to settle it."

// disputedBy returns the account's open or lost dispute when purchases from it are refused.
func (a *app) disputedBy(ctx context.Context, acct string) (ledger.Reversal, bool, error) {
	if !a.refuseDisputed {
		return ledger.Reversal{}, false, nil
	}
	ds, err := a.store.ListReversals(ctx, acct, ledger.ReversalDispute, maxReversals)
	if err != nil {
		return ledger.Reversal{}, false, err
	}
	for _, d := range ds {
		if d.Status == ledger.DisputeOpen || d.Status == ledger.DisputeLost {
			return d, true, nil
		}
	}
	return ledger.Reversal{}, false, nil
}

// buyPageData is the buy page as it is without a dispute: its packages, and the form that
// redeems a code (redeem.go).
func (a *app) buyPageData(sc *sessionCtx) page {
	p := sc.page("Buy credits", "buy")
	p.Data = buyData{Packages: a.packages, Enabled: a.stripe != nil, AccountID: sc.acct.ID, Prices: a.toolPrices(), TopUp: a.topUps != nil}
	return p
}

func (a *app) buyPage(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	p := a.buyPageData(sc)
	if n, err := strconv.ParseInt(r.URL.Query().Get("redeemed"), 10, 64); err == nil && n > 0 {
		p.Flash = fmt.Sprintf("Code redeemed: %d live credits were added to your account.", n)
	}
	status := http.StatusOK
	if a.stripe != nil {
		d, refused, err := a.disputedBy(r.Context(), sc.acct.ID)
		if err != nil {
			a.internalError(w, r, sc, "reading the account's disputes", err)
			return
		}
		if refused {
			a.logger.Info("buy page of a disputed account: buying refused", zap.String("account", sc.acct.ID), zap.String("dispute", d.ID))
			p.Error, p.Data, status = disputeRefusal, buyData{Packages: a.packages, Refused: true}, http.StatusForbidden
		}
	}
	a.render(w, r, status, "buy", p)
}

func (a *app) buy(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	if a.stripe == nil {
		a.errorPage(w, r, sc, http.StatusServiceUnavailable, "Buying is not available", noBuying(sc.acct.ID))
		return
	}
	id := r.PostFormValue("package")
	pkg, ok := a.packageBy[id]
	if !ok {
		p := sc.page("Buy credits", "buy")
		p.Error = "There is no such package. Choose one of the packages below."
		p.Data = buyData{Packages: a.packages, Enabled: true}
		a.render(w, r, http.StatusBadRequest, "buy", p)
		return
	}
	if d, refused, err := a.disputedBy(r.Context(), sc.acct.ID); err != nil {
		a.internalError(w, r, sc, "reading the account's disputes", err)
		return
	} else if refused {
		a.logger.Warn("a purchase from an account with a dispute was refused (refuse_disputed_purchases)",
			zap.String("account", sc.acct.ID), zap.String("dispute", d.ID), zap.String("dispute_status", d.Status))
		p := sc.page("Buy credits", "buy")
		p.Error = disputeRefusal
		p.Data = buyData{Packages: a.packages, Refused: true}
		a.render(w, r, http.StatusForbidden, "buy", p)
		return
	}
	base := a.baseURL(r) + a.prefix
	params := &stripe.CheckoutSessionCreateParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModePayment)),
		ClientReferenceID: stripe.String(sc.acct.ID),
		CustomerEmail:     stripe.String(sc.acct.Email),
		SuccessURL:        stripe.String(base + "/buy/success?session_id={CHECKOUT_SESSION_ID}"),
		CancelURL:         stripe.String(base + "/buy/cancel"),
		LineItems: []*stripe.CheckoutSessionCreateLineItemParams{{
			Quantity: stripe.Int64(1),
			PriceData: &stripe.CheckoutSessionCreateLineItemPriceDataParams{
				Currency:   stripe.String("eur"),
				UnitAmount: stripe.Int64(pkg.PriceCents),
				ProductData: &stripe.CheckoutSessionCreateLineItemPriceDataProductDataParams{
					Name: stripe.String(fmt.Sprintf("%d credits", pkg.Credits)),
				},
			},
		}},
		Metadata: map[string]string{
			"package":     pkg.ID,
			"credits":     strconv.FormatInt(pkg.Credits, 10),
			"price_cents": strconv.FormatInt(pkg.PriceCents, 10),
			"account_id":  sc.acct.ID,
		},
	}
	if pkg.Expires > 0 {
		// What this customer was offered, whatever the package becomes before the payment.
		params.Metadata["expires_seconds"] = strconv.FormatInt(int64(time.Duration(pkg.Expires)/time.Second), 10)
	}
	if a.invoiceCreation {
		params.InvoiceCreation = &stripe.CheckoutSessionCreateInvoiceCreationParams{Enabled: stripe.Bool(true)}
	}
	if a.taxIDCollection {
		params.TaxIDCollection = &stripe.CheckoutSessionCreateTaxIDCollectionParams{Enabled: stripe.Bool(true)}
	}
	cs, err := a.stripe.V1CheckoutSessions.Create(r.Context(), params)
	if err != nil || cs.URL == "" {
		a.logger.Error("creating a Stripe Checkout Session", zap.String("account", sc.acct.ID), zap.String("package", pkg.ID), zap.Error(err))
		a.errorPage(w, r, sc, http.StatusBadGateway, "Payment page not available",
			"The payment provider could not be reached. Nothing was charged; please try again in a moment.")
		return
	}
	// `caddy textgen stripe webhook --latest-from <log>` pays a local purchase from this line.
	a.logger.Info("checkout session created", zap.String("account", sc.acct.ID), zap.String("package", pkg.ID),
		zap.Int64("credits", pkg.Credits), zap.Int64("price_cents", pkg.PriceCents), zap.String("checkout_session", cs.ID))
	http.Redirect(w, r, cs.URL, http.StatusSeeOther)
}

type successData struct {
	Purchase *ledger.Entry
	// Unpaid is the session's payment when it is pending (a delayed payment method) or failed.
	Unpaid  *ledger.Payment
	Balance ledger.Balance
}

// buySuccess is Stripe's return page. It shows whether the webhook has credited the session
// yet; it never credits anything itself.
func (a *app) buySuccess(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	sid := r.URL.Query().Get("session_id")
	var d successData
	purchases, err := a.store.Purchases(r.Context(), sc.acct.ID, 100)
	if err != nil {
		a.internalError(w, r, sc, "reading purchases", err)
		return
	}
	for i := range purchases {
		if sid != "" && purchases[i].Reference == sid {
			d.Purchase = &purchases[i]
		}
	}
	if d.Purchase == nil && sid != "" {
		// Another account's session says nothing here, as on the receipt.
		p, err := a.store.PaymentOf(r.Context(), sid)
		switch {
		case err == nil && p.AccountID == sc.acct.ID && p.Status != ledger.PaymentPaid:
			d.Unpaid = &p
		case err != nil && !errors.Is(err, ledger.ErrNotFound) && !errors.Is(err, ledger.ErrInvalidArgument):
			a.internalError(w, r, sc, "reading the payment", err)
			return
		}
	}
	if d.Balance, err = a.store.Balance(r.Context(), sc.acct.ID); err != nil {
		a.internalError(w, r, sc, "reading balance", err)
		return
	}
	p := sc.page("Thank you", "buy")
	p.Data = d
	a.render(w, r, http.StatusOK, "buy_success", p)
}

func (a *app) buyCancel(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	p := sc.page("Payment cancelled", "buy")
	a.render(w, r, http.StatusOK, "buy_cancel", p)
}
