package pipeline

import (
	"context"
	"net/http"

	"github.com/caddy-textgen/textgen/ledger"
)

// MaxIdempotencyKey bounds an Idempotency-Key (Stripe allows 255 characters).
const MaxIdempotencyKey = 255

// ClaimResult is what a request that sent an Idempotency-Key finds when it claims the key.
type ClaimResult int

const (
	// Claimed: the key is this request's; it runs, and FinishIdempotent records its outcome.
	Claimed ClaimResult = iota
	// ClaimReused: the key was used with another body; nothing runs.
	ClaimReused
	// ClaimRunning: the key's first request still runs and has charged nothing yet; its kept
	// text, if any, may be followed, else the retry is refused for now.
	ClaimRunning
	// ClaimCharged: the key's first request was charged; the retry gets its result (its kept
	// text, if any, or its status) and no new charge.
	ClaimCharged
)

// Claim claims rec.Key for the request rec describes (rec.Fingerprint: the hash of its body).
// A first request that ended without a charge does not hold its key (FinishIdempotent released
// it): its retry claims the key and runs. prior is the key's record when it is not Claimed.
// The errors are the ledger's (ErrUnavailable among them).
func Claim(ctx context.Context, store ledger.Idempotency, rec ledger.IdempotencyRecord) (res ClaimResult, prior ledger.IdempotencyRecord, err error) {
	prior, fresh, err := store.BeginIdempotent(ctx, rec)
	switch {
	case err != nil:
		return Claimed, prior, err
	case fresh:
		return Claimed, prior, nil
	case prior.Fingerprint != rec.Fingerprint:
		return ClaimReused, prior, nil
	case prior.Status == 0:
		return ClaimRunning, prior, nil
	default:
		return ClaimCharged, prior, nil
	}
}

// Replayable reports whether a retry may be sent the first request's kept text: the first
// runs, or it ended charged (200).
func Replayable(prior ledger.IdempotencyRecord) bool {
	return prior.Status == 0 || prior.Status == http.StatusOK
}
