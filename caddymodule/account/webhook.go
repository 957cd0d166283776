package account

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/stripe/stripe-go/v82/webhook"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/clientip"
	"github.com/caddy-textgen/textgen/ledger"
)

// The Stripe webhook credits paid Checkout Sessions.
//
//   - The signature (Stripe-Signature, HMAC-SHA256 with the endpoint's secret) and its
//     timestamp (at most WebhookTolerance old) are checked first; a failure is 400.
//   - checkout.session.completed and checkout.session.async_payment_succeeded credit the
//     session's package when payment_status is "paid". Other events, unpaid sessions (an async
//     payment still pending: its async_payment_succeeded event comes later), unknown packages
//     and unknown accounts are acknowledged with 200 and logged, because retrying cannot change
//     them; a paid session that cannot be credited is logged as an error for the operator.
//   - A session is credited only when it paid the price of its package in EUR (the package as
//     the session was created for it: its metadata); any other amount or currency is logged as
//     an error and credits nothing.
//   - The purchase is a ledger grant whose reference is the Checkout Session id: a replayed or
//     retried event (Stripe delivers at least once) credits nothing the second time.
//   - 2xx is sent only after the grant is durable (synced to disk). If the ledger fails, the
//     answer is 500 and Stripe retries for up to three days, so a paid session is never lost.
//
// The event's API version is not checked (IgnoreAPIVersionMismatch): only fields that every
// version has are read (id, client_reference_id, payment_status, amount_total, currency,
// metadata), so the endpoint may be registered with any API version.

// checkoutSession is the part of a Checkout Session object the webhook reads.
type checkoutSession struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	ClientReferenceID string            `json:"client_reference_id"`
	PaymentStatus     string            `json:"payment_status"`
	AmountTotal       int64             `json:"amount_total"`
	Currency          string            `json:"currency"`
	Mode              string            `json:"mode"`
	Metadata          map[string]string `json:"metadata"`
}

func (a *app) webhook(w http.ResponseWriter, r *http.Request) {
	if a.stripe == nil {
		http.Error(w, "buying credits is not configured", http.StatusNotFound)
		return
	}
	payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		webhookReply(w, http.StatusRequestEntityTooLarge, "body too large or unreadable")
		return
	}
	ev, err := webhook.ConstructEventWithOptions(payload, r.Header.Get("Stripe-Signature"), a.webhookSecret,
		webhook.ConstructEventOptions{Tolerance: a.webhookTolerance, IgnoreAPIVersionMismatch: true})
	if err != nil {
		a.logger.Warn("refused a Stripe webhook", zap.Error(err), zap.String("client", clientip.Key(r)))
		msg := "invalid signature"
		if errors.Is(err, webhook.ErrTooOld) {
			msg = "timestamp outside the tolerance"
		}
		webhookReply(w, http.StatusBadRequest, msg)
		return
	}
	log := a.logger.With(zap.String("event", ev.ID), zap.String("type", string(ev.Type)))
	switch ev.Type {
	case "checkout.session.completed", "checkout.session.async_payment_succeeded":
	default:
		log.Debug("ignored a Stripe event of another type")
		webhookReply(w, http.StatusOK, "ignored: event type")
		return
	}
	var cs checkoutSession
	if ev.Data == nil || json.Unmarshal(ev.Data.Raw, &cs) != nil || cs.ID == "" {
		log.Error("a checkout event without a readable Checkout Session; not credited")
		webhookReply(w, http.StatusOK, "ignored: no checkout session")
		return
	}
	log = log.With(zap.String("checkout_session", cs.ID), zap.String("account", cs.ClientReferenceID))
	if cs.PaymentStatus != "paid" {
		log.Info("checkout session not paid (yet); not credited", zap.String("payment_status", cs.PaymentStatus))
		webhookReply(w, http.StatusOK, "ignored: not paid")
		return
	}
	pkgID := cs.Metadata["package"]
	pkg, ok := a.sessionPackage(cs)
	if !ok {
		log.Error("a PAID checkout session names a package that is not configured; NOT credited: credit it by hand ("+grantByHand+")",
			zap.String("package", pkgID), zap.Int64("amount_cents", cs.AmountTotal))
		webhookReply(w, http.StatusOK, "ignored: unknown package")
		return
	}
	if !strings.EqualFold(cs.Currency, "eur") || cs.AmountTotal != pkg.PriceCents {
		// A price changed by hand in Stripe, a coupon, a tampered session: the customer paid
		// something else than the package costs. Crediting it anyway would sell credits below
		// their price; the operator decides (credit by hand, or refund).
		log.Error("a PAID checkout session's amount is not its package's price; NOT credited: check the payment in Stripe, then credit it by hand ("+grantByHand+") or refund it",
			zap.String("package", pkg.ID), zap.Int64("credits", pkg.Credits), zap.String("currency", cs.Currency),
			zap.Int64("amount_cents", cs.AmountTotal), zap.Int64("price_cents", pkg.PriceCents))
		webhookReply(w, http.StatusOK, "ignored: amount differs from the package price")
		return
	}
	res, err := a.store.Grant(r.Context(), ledger.GrantRequest{
		AccountID:   cs.ClientReferenceID,
		Mode:        ledger.Live,
		Kind:        ledger.KindPurchase,
		Credits:     pkg.Credits,
		Reference:   cs.ID,
		Reason:      checkoutReason + pkg.ID,
		AmountCents: cs.AmountTotal,
		Currency:    strings.ToUpper(cs.Currency),
	})
	if errors.Is(err, ledger.ErrNotFound) {
		log.Error("a PAID checkout session names an account that does not exist; NOT credited: refund it, or credit the right account by hand ("+grantByHand+")",
			zap.String("package", pkgID), zap.Int64("amount_cents", cs.AmountTotal))
		webhookReply(w, http.StatusOK, "ignored: unknown account")
		return
	}
	if err != nil {
		log.Error("crediting a paid checkout session failed; answering 500 so that Stripe retries", zap.Error(err))
		webhookReply(w, http.StatusInternalServerError, "ledger error")
		return
	}
	if res.Repeated {
		log.Info("checkout session was credited before; nothing credited again")
		webhookReply(w, http.StatusOK, "duplicate: credited before")
		return
	}
	log.Info("purchase credited", zap.String("package", pkg.ID), zap.Int64("credits", pkg.Credits),
		zap.Int64("amount_cents", cs.AmountTotal), zap.Int64("available", res.Balance.Available))
	webhookReply(w, http.StatusOK, "credited")
}

// grantByHand is the command an operator runs to credit a paid session the webhook could not.
const grantByHand = "caddy textgen credits grant --account <account id> --credits <n> --reference <checkout session id>"

// sessionPackage is the package a Checkout Session was created for: its credits and price as
// buy wrote them into the session's metadata (a later change of the configured package does not
// change what this customer was offered), else the configured package of that id.
func (a *app) sessionPackage(cs checkoutSession) (Package, bool) {
	pkg, ok := a.packageBy[cs.Metadata["package"]]
	credits, cerr := strconv.ParseInt(cs.Metadata["credits"], 10, 64)
	price, perr := strconv.ParseInt(cs.Metadata["price_cents"], 10, 64)
	if cerr == nil && perr == nil && credits > 0 && price > 0 && cs.Metadata["package"] != "" {
		return Package{ID: cs.Metadata["package"], Credits: credits, PriceCents: price}, true
	}
	return pkg, ok
}

func webhookReply(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"status": msg})
}
