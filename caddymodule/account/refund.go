package account

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/stripe/stripe-go/v82"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// The operator's refund (`caddy textgen payments refund`, through the admin API): a refund made
// with Stripe's API, with this area's Stripe key, and applied to the ledger through the same
// path as Stripe's refund events (applyReversal), by the refund's id. The event Stripe sends for
// the refund later finds it applied, so the command and its event take the credits once,
// whichever comes first.

// Refund refunds amountCents (0: all that is left) of the purchase reference.
func (a *app) Refund(ctx context.Context, reference string, amountCents int64, reason string) (ledger.ReversalResult, error) {
	p, err := a.store.PaymentOf(ctx, reference)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.ReversalResult{}, fmt.Errorf("%w: no paid purchase has the reference %s (see caddy textgen history)", textgenapp.ErrRefund, reference)
	}
	if err != nil {
		return ledger.ReversalResult{}, err
	}
	left := p.AmountCents - p.RefundedCents
	switch {
	case p.Status != ledger.PaymentPaid:
		return ledger.ReversalResult{}, fmt.Errorf("%w: the payment of %s is %s, not paid", textgenapp.ErrRefund, reference, p.Status)
	case amountCents == 0:
		amountCents = left
	}
	if amountCents <= 0 || amountCents > left {
		return ledger.ReversalResult{}, fmt.Errorf("%w: %d cents asked, %d of %d cents of %s are left to refund",
			textgenapp.ErrRefund, amountCents, max(left, 0), p.AmountCents, reference)
	}
	params := &stripe.RefundCreateParams{PaymentIntent: stripe.String(p.ID), Amount: stripe.Int64(amountCents),
		Metadata: map[string]string{"checkout_session": reference, "account_id": p.AccountID, "origin": "caddy textgen payments refund"}}
	if reason != "" {
		params.Reason = stripe.String(reason)
	}
	// A command repeated after a lost answer (same purchase, amount and refunds before it) gets
	// Stripe's first refund back, not a second one.
	params.SetIdempotencyKey("textgen-refund-" + p.ID + "-" + strconv.FormatInt(p.RefundedCents, 10) + "-" + strconv.FormatInt(amountCents, 10))
	log := a.logger.With(zap.String("checkout_session", reference), zap.String("origin", "operator"))
	re, err := a.stripe.V1Refunds.Create(ctx, params)
	if err != nil {
		log.Error("Stripe refused the operator's refund; nothing refunded", zap.Error(err))
		return ledger.ReversalResult{}, fmt.Errorf("%w: Stripe answered: %w", textgenapp.ErrRefund, err)
	}
	rev := refundReversal(re, p.ID)
	rev.req.Payment = p.ID // the one asked for
	status, reply, res := a.applyReversal(ctx, log, rev)
	if status != http.StatusOK {
		// Refunded at Stripe, not in the ledger yet: Stripe's event will apply it.
		return ledger.ReversalResult{}, fmt.Errorf("refund %s was made at Stripe but the ledger did not take it yet (%s); Stripe's refund event will apply it", re.ID, reply)
	}
	return res, nil
}

// Interface guards
var _ textgenapp.Refunder = (*app)(nil)
