package account

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/stripe/stripe-go/v82"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// Purchases from before payments were recorded: a refund or dispute names a payment intent the
// ledger does not know, because its purchase was credited by a version that did not record it
// (or its checkout.session.completed has not arrived yet). Rather than answering 500 until
// Stripe gives up, the webhook asks Stripe's API which Checkout Session that payment intent
// paid (the list of sessions filtered by payment_intent), and, when the ledger holds that
// session's purchase for the session's account, records the payment with what the purchase
// credited (the ledger's entry, never what the session says) and applies the event.
//
//   - A session found whose purchase the ledger does not hold (its completion is still on its
//     way, or it credited nothing and is not in the unmatched payments) links nothing: 500, so
//     that Stripe delivers the event again.
//   - No session has the payment intent: the charge was not made by Checkout, so it is no
//     purchase of this service; acknowledged (200) and ignored, as a charge without a payment
//     intent is.
//   - Stripe unreachable or refusing: 500, retried.

// linkOutcome is what linkPayment found.
type linkOutcome int

const (
	linkRetry   linkOutcome = iota // nothing to link yet, or Stripe or the ledger failed: 500
	linkLinked                     // the payment is recorded now: apply the event again
	linkNotOurs                    // no Checkout Session paid with it: not a purchase
)

// linkPayment looks up the Checkout Session of payment intent pi at Stripe and records the
// payment of its purchase.
func (a *app) linkPayment(ctx context.Context, log *zap.Logger, pi string) linkOutcome {
	if a.stripe == nil {
		return linkRetry
	}
	params := &stripe.CheckoutSessionListParams{PaymentIntent: stripe.String(pi)}
	params.Limit = stripe.Int64(3)
	var sessions []*stripe.CheckoutSession
	for cs, err := range a.stripe.V1CheckoutSessions.List(ctx, params) {
		if err != nil {
			log.Warn("looking up the Checkout Session of a payment intent at Stripe failed; answering 500 so that Stripe retries", zap.Error(err))
			return linkRetry
		}
		// Only a session that names this payment intent: an answer about another payment
		// must not attach this refund to another purchase.
		if cs.PaymentIntent != nil && cs.PaymentIntent.ID == pi {
			sessions = append(sessions, cs)
		}
		if len(sessions) > 0 {
			break
		}
	}
	if len(sessions) == 0 {
		log.Warn("no Checkout Session was paid with this payment intent (Stripe's API says so): not a purchase of this service; nothing taken")
		return linkNotOurs
	}
	cs := sessions[0]
	acct := cs.ClientReferenceID
	if acct == "" {
		acct = cs.Metadata["account_id"]
	}
	log = log.With(zap.String("checkout_session", cs.ID), zap.String("account", acct))
	p, err := a.paymentOfSession(ctx, cs, acct, pi)
	if err != nil {
		if errors.Is(err, ledger.ErrNotFound) {
			log.Warn("the payment intent's Checkout Session has no purchase in the ledger (yet); answering 500 so that Stripe retries once it is recorded")
		} else {
			log.Error("linking the payment intent to its purchase failed; answering 500 so that Stripe retries", zap.Error(err))
		}
		return linkRetry
	}
	if _, _, err := a.store.RecordPayment(ctx, p); err != nil {
		log.Error("recording the payment of an earlier purchase failed; answering 500 so that Stripe retries", zap.Error(err))
		return linkRetry
	}
	log.Info("the payment of a purchase credited before payments were recorded is linked to it now", zap.Int64("credits", p.Credits))
	return linkLinked
}

// paymentOfSession is the payment of the Checkout Session cs of account acct, paid with pi, as
// the ledger knows its purchase: what its entry credited, or nothing for a session kept in the
// unmatched payments. ErrNotFound when the ledger holds neither.
func (a *app) paymentOfSession(ctx context.Context, cs *stripe.CheckoutSession, acct, pi string) (ledger.Payment, error) {
	p := ledger.Payment{ID: pi, Reference: cs.ID, AccountID: acct, Package: cs.Metadata["package"], Status: ledger.PaymentPaid,
		AmountCents: cs.AmountTotal, Currency: strings.ToLower(string(cs.Currency))}
	if acct != "" {
		e, err := a.store.Purchase(ctx, acct, cs.ID)
		switch {
		case err == nil:
			p.Credits, p.AmountCents, p.Currency = e.Amount, e.AmountCents, strings.ToLower(e.Currency)
			if p.Currency == "" {
				p.Currency = "eur"
			}
			return p, nil
		case !errors.Is(err, ledger.ErrNotFound) && !errors.Is(err, ledger.ErrInvalidArgument):
			return p, err
		}
	}
	unmatched, err := a.store.UnmatchedPayments(ctx, false, 1000)
	if err != nil {
		return p, err
	}
	for _, u := range unmatched {
		if u.Reference == cs.ID {
			p.AccountID, p.Credits = u.AccountID, 0 // credited nothing: its refund takes nothing
			if p.Currency == "" {
				p.Currency = strings.ToLower(cmp.Or(u.Currency, "eur"))
			}
			return p, nil
		}
	}
	return p, fmt.Errorf("checkout session %s: %w", cs.ID, ledger.ErrNotFound)
}
