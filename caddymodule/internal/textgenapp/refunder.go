package textgenapp

import (
	"context"
	"errors"

	"github.com/caddy-textgen/textgen/ledger"
)

// Refunds for the admin API: `caddy textgen payments refund` asks My Account of the same ledger,
// which holds the Stripe key, to refund a purchase through Stripe's API; the ledger follows
// through the path of Stripe's refund events. My Account registers itself when it starts (with
// buying on) and withdraws in its Cleanup; during a reload the newest registration answers.

// ErrRefund is a refund the operator asked for that cannot be made, and nothing was refunded:
// the purchase has no payment, the amount is more than what is left, Stripe refused it.
var ErrRefund = errors.New("refund not made")

// Refunder refunds purchases at the payment provider.
type Refunder interface {
	// Refund refunds amountCents (0: what is left) of the purchase reference with reason (the
	// provider's: duplicate, fraudulent, requested_by_customer; "" for none) and applies it to
	// the ledger as the provider's event would.
	Refund(ctx context.Context, reference string, amountCents int64, reason string) (ledger.ReversalResult, error)
}

var refunders registry[Refunder]

// RegisterRefunder makes r answer refunds for store until the returned func is called.
func RegisterRefunder(store appLedger, r Refunder) (unregister func()) {
	return refunders.register(store, r)
}

// RefunderFor returns the newest refunder registered for store, or nil.
func RefunderFor(store appLedger) Refunder { return refunders.newest(store) }
