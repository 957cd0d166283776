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

// settleRetryFor is the least time a settle that the ledger could not take is retried for.
const settleRetryFor = time.Hour

// holdOp is a settle or a void of the request's hold.
type holdOp struct {
	name    string // "settle", "void": the ledger_op_duration label
	outcome string // "settled", "voided": the credits_total label
	do      func(ctx context.Context) (ledger.HoldResult, error)
}

// settleOp is the settle of a charge decided now (the text was delivered): it carries that
// moment, so that the ledger still charges it when it arrives after the hold's expiry and a
// sweep's void (the ledger, or this instance, stalled in between), once.
func (g *generation) settleOp() holdOp {
	decided := time.Now()
	return holdOp{"settle", "settled", func(ctx context.Context) (ledger.HoldResult, error) {
		return g.store.SettleDecided(ctx, g.acct.ID, g.id, decided)
	}}
}

func (g *generation) voidOp(reason string) holdOp {
	return holdOp{"void", "voided", func(ctx context.Context) (ledger.HoldResult, error) {
		return g.store.Void(ctx, g.acct.ID, g.id, reason)
	}}
}

// resolve settles or voids the request's hold and reports whether the ledger took it: now (the
// account's available credits are then what the client is told), or later, when it cannot now
// (ErrUnavailable) and op is retried in the background (resolveLater). Any other failure is
// logged and leaves the hold to expire: never charged twice, at worst once too little.
func (g *generation) resolve(ctx context.Context, op holdOp) (taken bool) {
	t0 := time.Now()
	res, err := op.do(ctx)
	metrics.ledgerOps.WithLabelValues(op.name).Observe(time.Since(t0).Seconds())
	g.resolved()
	switch {
	case err == nil:
		metrics.credits.WithLabelValues(op.outcome, string(g.key.Mode)).Inc()
		g.remaining = res.Available
		return true
	case errors.Is(err, ledger.ErrUnavailable):
		g.h.logger.Warn(op.name+" later: the ledger is unavailable", zap.String("request_id", g.id), zap.Error(err))
		g.resolveLater(op)
		return true
	default:
		g.h.logger.Error(op.name+" of the hold failed; it expires on its own", zap.String("request_id", g.id),
			zap.String("account_id", g.acct.ID), zap.Error(err))
		return false
	}
}

// resolveLater retries op until the ledger takes it, the hold turns out resolved already (the
// expiry sweep of another instance, say), or the ledger fails otherwise. A void is given up once
// the hold's own TTL has passed (by then a sweep has voided it); a settle is retried for at least
// settleRetryFor, since the ledger still charges a hold voided as expired after the charge was
// decided (ledger.Credits.SettleDecided).
func (g *generation) resolveLater(op holdOp) {
	log := g.h.logger.With(zap.String("request_id", g.id), zap.String("account_id", g.acct.ID), zap.String("op", op.name))
	mode := string(g.key.Mode)
	until, why := time.Duration(g.h.HoldTTL), "the hold's TTL has passed"
	if op.name == "settle" && until < settleRetryFor {
		until, why = settleRetryFor, "the ledger was unavailable for "+settleRetryFor.String()
	}
	retryLater(log, op.name, time.Now().Add(until), why, func(ctx context.Context) error {
		res, err := op.do(ctx)
		switch {
		case err != nil:
			return err
		case res.Repeated:
			log.Warn("the hold was resolved meanwhile by another (an expiry sweep?)", zap.String("state", string(res.State)))
		default:
			metrics.credits.WithLabelValues(op.outcome, mode).Inc()
			log.Info("the ledger took the delayed " + op.name)
		}
		return nil
	})
}

// retryLater runs op again in the background while the ledger is unavailable (ErrUnavailable),
// pausing from retryFirst up to retryMax, until op is done (nil), fails otherwise, or deadline
// has passed (expired says why that ends it); what names op in the log.
func retryLater(log *zap.Logger, what string, deadline time.Time, expired string, op func(context.Context) error) {
	go func() {
		pause := retryFirst
		for time.Now().Before(deadline) {
			time.Sleep(pause)
			pause = min(2*pause, retryMax)
			err := op(context.Background())
			switch {
			case err == nil:
				return
			case errors.Is(err, ledger.ErrUnavailable):
				continue
			default:
				log.Error("giving up the delayed "+what, zap.Error(err))
				return
			}
		}
		log.Error("giving up the delayed " + what + ": " + expired)
	}()
}
