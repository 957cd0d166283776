package caddymodule

import (
	"context"

	"github.com/caddy-textgen/textgen/ledger"
)

// handlerLedger is what the generate handler asks of its ledger: the roles it uses, no more.
// The textgen app hands every module the whole ledger.Store, which satisfies it.
type handlerLedger interface {
	ledger.Keys
	ledger.Credits
	ledger.Idempotency
	ledger.Generations
	ledger.Maintenance
	ledger.Receipts
	// Reports: GET /api/v1/usage.
	ledger.Reports
	// Redeem of ledger.Codes: POST /api/v1/credits/redeem.
	Redeem(ctx context.Context, accountID, code string) (ledger.Redemption, error)
}
