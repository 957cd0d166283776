package pipeline

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// FinishIdempotent records the outcome of the request that claimed an Idempotency-Key: its
// status (200) when it was charged, so that a retry is answered from the record, else a release
// (ledger.StatusReleased), so that a retry of a request that charged nothing runs. While the
// ledger is unavailable the record is finished later: left unfinished, it would answer every
// retry 409 (or, charged, run it again once the key is forgotten).
// log gets its warnings and errors under the request's id.
func FinishIdempotent(ctx context.Context, store ledger.Idempotency, log *zap.Logger, requestID, accountID, recordKey string, charged bool) {
	status := ledger.StatusReleased
	if charged {
		status = http.StatusOK
	}
	finish := func(ctx context.Context) error { return store.FinishIdempotent(ctx, accountID, recordKey, status) }
	err := finish(ctx)
	switch {
	case errors.Is(err, ledger.ErrUnavailable):
		log := log.With(zap.String("request_id", requestID))
		log.Warn("finishing the idempotency record later: the ledger is unavailable", zap.Error(err))
		RetryLater(log, "idempotency record", time.Now().Add(ledger.IdempotencyTTL), "the key's 24 hours have passed", finish)
	case err != nil:
		log.Error("finishing idempotency record", zap.String("request_id", requestID), zap.Error(err))
	}
}
