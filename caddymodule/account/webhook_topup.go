package account

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/stripe/stripe-go/v82"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The webhook's events of automatic top-ups (topup.go):
//
//   - checkout.session.completed of a session in setup mode (the top-up page's "Save a card")
//     reads the session's SetupIntent from Stripe's API for its payment method and card, and
//     saves it as the account's card, which unpauses its rule.
//   - payment_intent.succeeded of a PaymentIntent with a top-up's metadata credits the package as
//     a purchase does: the amount and currency must be the package's price (else the payment is
//     kept as unmatched, for the operator), and the grant's reference is the PaymentIntent's id,
//     so a replayed event credits nothing more. Then the top-up is marked succeeded.
//   - payment_intent.payment_failed and payment_intent.requires_action of a top-up fail it (or
//     mark it as needing the customer), pause the rule and e-mail the account, once.
//
// PaymentIntents without top-up metadata (those of Checkout purchases) are acknowledged and left
// to the checkout events. As for purchases, 2xx is sent only once the ledger has what the event
// said; a ledger failure is 500, and Stripe delivers it again.

// topUpIntent is the part of a PaymentIntent the webhook reads.
type topUpIntent struct {
	ID               string            `json:"id"`
	Amount           int64             `json:"amount"`
	AmountReceived   int64             `json:"amount_received"`
	Currency         string            `json:"currency"`
	Status           string            `json:"status"`
	Metadata         map[string]string `json:"metadata"`
	LastPaymentError *struct {
		Message string `json:"message"`
		Code    string `json:"code"`
	} `json:"last_payment_error"`
}

// setupSession is the part of a setup-mode Checkout Session the webhook reads.
type setupSession struct {
	ID                string `json:"id"`
	Mode              string `json:"mode"`
	ClientReferenceID string `json:"client_reference_id"`
	Customer          string `json:"customer"`
	SetupIntent       string `json:"setup_intent"`
}

// webhookTopUp handles ev if it is a top-up's event and reports whether it did.
func (a *app) webhookTopUp(w http.ResponseWriter, r *http.Request, log *zap.Logger, ev stripe.Event) bool {
	switch ev.Type {
	case "checkout.session.completed":
		var cs setupSession
		if json.Unmarshal(ev.Data.Raw, &cs) != nil || cs.Mode != "setup" {
			return false
		}
		a.savedCard(w, r, log.With(zap.String("checkout_session", cs.ID), zap.String("account", cs.ClientReferenceID)), cs)
		return true
	case "payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.requires_action":
	default:
		return false
	}
	var pi topUpIntent
	if json.Unmarshal(ev.Data.Raw, &pi) != nil || pi.ID == "" {
		log.Error("a payment intent event without a readable PaymentIntent")
		webhookReply(w, http.StatusOK, "ignored: no payment intent")
		return true
	}
	id := pi.Metadata["topup_id"]
	if id == "" {
		log.Debug("a payment intent that is not a top-up's (a Checkout purchase's): left to the checkout events")
		webhookReply(w, http.StatusOK, "ignored: not a top-up")
		return true
	}
	log = log.With(zap.String("topup", id), zap.String("payment_intent", pi.ID), zap.String("account", pi.Metadata["account_id"]))
	t, err := a.store.GetTopUp(r.Context(), id)
	switch {
	case errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidArgument) || (err == nil && t.AccountID != pi.Metadata["account_id"]):
		log.Error("a top-up payment of no top-up of this ledger (another site's Stripe account?); nothing done")
		webhookReply(w, http.StatusOK, "ignored: unknown top-up")
		return true
	case err != nil:
		log.Error("reading the top-up failed; answering 500 so that Stripe retries", zap.Error(err))
		webhookReply(w, http.StatusInternalServerError, "ledger error")
		return true
	}
	switch ev.Type {
	case "payment_intent.succeeded":
		a.topUpPaid(w, r, log, ev, t, pi)
	default:
		status, why := ledger.TopUpFailed, "Your card was declined."
		if pi.LastPaymentError != nil && pi.LastPaymentError.Message != "" {
			why = "Your card was declined: " + pi.LastPaymentError.Message
		}
		if ev.Type == "payment_intent.requires_action" {
			status, why = ledger.TopUpNeedsAction, "Your bank asks you to confirm this payment. Save your card again to confirm it for automatic top-ups."
		}
		got, changed, err := a.store.FinishTopUp(r.Context(), t.ID, status, why)
		if err != nil {
			log.Error("recording a failed top-up failed; answering 500 so that Stripe retries", zap.Error(err))
			webhookReply(w, http.StatusInternalServerError, "ledger error")
			return true
		}
		if changed {
			a.ruleChanged(ledger.TopUpRule{AccountID: t.AccountID})
			a.topUpEvent(r.Context(), t.AccountID, "topup.failed", got)
			a.mailTopUpFailed(r.Context(), log, t.AccountID, why)
			log.Info("top-up failed; its rule is paused", zap.String("status", status))
		}
		webhookReply(w, http.StatusOK, "top-up "+got.Status)
	}
	return true
}

// topUpPaid credits a top-up's payment once, as webhook credits a purchase.
func (a *app) topUpPaid(w http.ResponseWriter, r *http.Request, log *zap.Logger, ev stripe.Event, t ledger.TopUp, pi topUpIntent) {
	paid := pi.AmountReceived
	if paid == 0 {
		paid = pi.Amount
	}
	res, pkg, ok := a.creditPaid(w, r, log, paidPackage{event: ev.ID, account: t.AccountID, reference: pi.ID, intent: pi.ID,
		reason: topUpReason, cents: paid, currency: pi.Currency, metadata: pi.Metadata})
	if !ok {
		return
	}
	got, changed, err := a.store.FinishTopUp(r.Context(), t.ID, ledger.TopUpSucceeded, "")
	if err != nil {
		log.Error("marking a credited top-up succeeded failed; answering 500 so that Stripe retries", zap.Error(err))
		webhookReply(w, http.StatusInternalServerError, "ledger error")
		return
	}
	if changed {
		a.topUpEvent(r.Context(), t.AccountID, "topup.succeeded", got)
	}
	if res.Repeated {
		log.Info("top-up was credited before; nothing credited again")
		webhookReply(w, http.StatusOK, "duplicate: credited before")
		return
	}
	log.Info("top-up credited", zap.String("package", pkg.ID), zap.Int64("credits", pkg.Credits),
		zap.Int64("amount_cents", paid), zap.Int64("available", res.Balance.Available))
	webhookReply(w, http.StatusOK, "credited")
}

// topUpReason is the reason of a top-up's purchase entry, before the package id.
const topUpReason = "automatic top-up: package "

// savedCard saves the card of a completed setup-mode Checkout Session as the account's.
func (a *app) savedCard(w http.ResponseWriter, r *http.Request, log *zap.Logger, cs setupSession) {
	if cs.SetupIntent == "" || cs.ClientReferenceID == "" {
		log.Error("a setup session without a SetupIntent or an account; no card saved")
		webhookReply(w, http.StatusOK, "ignored: no setup intent")
		return
	}
	params := &stripe.SetupIntentRetrieveParams{}
	params.AddExpand("payment_method")
	si, err := a.stripe.V1SetupIntents.Retrieve(r.Context(), cs.SetupIntent, params)
	if err != nil {
		log.Error("reading the SetupIntent of a saved card from Stripe failed; answering 500 so that Stripe retries", zap.Error(err))
		webhookReply(w, http.StatusInternalServerError, "stripe error")
		return
	}
	card := ledger.TopUpCard{CustomerID: cs.Customer}
	if si.Customer != nil && si.Customer.ID != "" {
		card.CustomerID = si.Customer.ID
	}
	if si.PaymentMethod != nil {
		card.PaymentMethodID = si.PaymentMethod.ID
		if c := si.PaymentMethod.Card; c != nil {
			card.Brand, card.Last4 = string(c.Brand), c.Last4
		}
	}
	if card.CustomerID == "" || card.PaymentMethodID == "" {
		log.Error("a setup session without a customer or payment method; no card saved")
		webhookReply(w, http.StatusOK, "ignored: no payment method")
		return
	}
	rule, err := a.store.SaveTopUpCard(r.Context(), cs.ClientReferenceID, card)
	if errors.Is(err, ledger.ErrNotFound) {
		log.Error("a saved card for no account of this ledger; nothing saved")
		webhookReply(w, http.StatusOK, "ignored: unknown account")
		return
	}
	if err != nil {
		log.Error("saving a card failed; answering 500 so that Stripe retries", zap.Error(err))
		webhookReply(w, http.StatusInternalServerError, "ledger error")
		return
	}
	a.ruleChanged(rule)
	log.Info("card saved for automatic top-up", zap.String("brand", card.Brand), zap.String("last4", card.Last4))
	webhookReply(w, http.StatusOK, "card saved")
}
