package textgenapp

import (
	"context"

	"github.com/caddy-textgen/textgen/caddymodule/internal/receipts"
)

// Receipt signing for My Account and the admin API: the textgen handler holds the sealing key
// that opens a ledger's receipt signing key (internal/receipts), so My Account asks the handler
// of its ledger to sign a purchase's receipt, and `caddy textgen receipts rotate-key` asks it to
// rotate. The handler registers when it starts (with retention on) and withdraws in its
// Cleanup; during a reload the newest registration answers.

// ReceiptSigner signs receipts with a ledger's current key.
type ReceiptSigner interface {
	Sign(ctx context.Context, receipt any) (receipts.Signed, error)
	Rotate(ctx context.Context) (receipts.PublicKey, error)
	PublicKeys(ctx context.Context) (receipts.KeySet, error)
}

var signers registry[ReceiptSigner]

// RegisterReceiptSigner makes s sign for store until the returned func is called.
func RegisterReceiptSigner(store appLedger, s ReceiptSigner) (unregister func()) {
	return signers.register(store, s)
}

// ReceiptSignerFor returns the newest signer registered for store, or nil.
func ReceiptSignerFor(store appLedger) ReceiptSigner { return signers.newest(store) }
