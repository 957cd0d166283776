package caddymodule

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// A hold is durable before its generation starts, so its settle or void may come later: when the
// ledger cannot take it now (ErrUnavailable: the database is restarting, say), it is retried in
// the background rather than dropped. A settle that was dropped would let the hold expire and be
// voided: text delivered for free. Until the retry succeeds the credit stays held, so nothing is
// ever spent twice.

// retryFirst and retryMax bound the pause between two attempts.
const (
	retryFirst = 250 * time.Millisecond
	retryMax   = 5 * time.Second
)

// resolveLater retries op (settle or void) of the request's hold until the ledger takes it, the
// hold turns out resolved already (the expiry sweep of another instance, say), the ledger closes,
// or the hold's own TTL has passed (by then it has been voided by a sweep).
func (g *generation) resolveLater(what string, op func(ctx context.Context) (ledger.HoldResult, error)) {
	log := g.h.logger.With(zap.String("request_id", g.id), zap.String("account_id", g.acct.ID), zap.String("op", what))
	deadline := time.Now().Add(time.Duration(g.h.HoldTTL))
	mode := string(g.key.Mode)
	go func() {
		pause := retryFirst
		for time.Now().Before(deadline) {
			time.Sleep(pause)
			pause = min(2*pause, retryMax)
			res, err := op(context.Background())
			switch {
			case err == nil && res.Repeated:
				log.Warn("the hold was resolved meanwhile by another (an expiry sweep?)", zap.String("state", string(res.State)))
				return
			case err == nil:
				outcome := "voided"
				if what == "settle" {
					outcome = "settled"
				}
				metrics.credits.WithLabelValues(outcome, mode).Inc()
				log.Info("the ledger took the delayed " + what)
				return
			case errors.Is(err, ledger.ErrUnavailable):
				continue
			default:
				log.Error("giving up the delayed "+what, zap.Error(err))
				return
			}
		}
		log.Error("giving up the delayed " + what + ": the hold's TTL has passed")
	}()
}
