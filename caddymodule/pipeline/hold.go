package pipeline

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

// settleRetryFor is the least time a settle that the ledger could not take is retried for.
const settleRetryFor = time.Hour

// Observer is told of the ledger's work on holds (the adapter's metrics). Its methods must not
// block.
type Observer interface {
	// LedgerOp: a call to the ledger ("reserve", "settle", "void") took d.
	LedgerOp(op string, d time.Duration)
	// Resolved: the ledger took a settle ("settled") or void ("voided") of a hold in mode.
	Resolved(outcome string, mode ledger.Mode)
	// HoldsOpen: delta holds were reserved (+1) or resolved (-1) by this process.
	HoldsOpen(delta int)
}

// Hold is one request's reserved credit, from Reserve until it is settled or voided.
type Hold struct {
	credits ledger.Credits
	req     ledger.HoldRequest
	log     *zap.Logger
	obs     Observer
	open    bool
	// Available is the account's available credit as the ledger last reported it.
	Available int64
	// Price is what the hold reserved, and what its settle charges.
	Price int64
}

// Reserve holds req's price (req.Credits) for req (ledger.Credits.Reserve: in memory, in commit order, without
// waiting for the disk, so the model never waits for a sync). Its errors are the ledger's:
// ErrInsufficientCredits, ErrMemberCapReached, ErrAccountDisabled, ErrKeyBudgetExhausted,
// ErrUnavailable, or another failure. log gets the resolutions' warnings and errors.
func Reserve(ctx context.Context, credits ledger.Credits, req ledger.HoldRequest, log *zap.Logger, obs Observer) (Hold, error) {
	t0 := time.Now()
	res, err := credits.Reserve(ctx, req)
	obs.LedgerOp("reserve", time.Since(t0))
	if err != nil {
		return Hold{}, err
	}
	obs.HoldsOpen(1)
	return Hold{credits: credits, req: req, log: log, obs: obs, open: true, Available: res.Available, Price: ledger.HeldCredits(res.Credits)}, nil
}

// Open reports whether the hold is reserved and not yet settled or voided.
func (h *Hold) Open() bool { return h.open }

// Settle charges the held credit, a charge decided now (the text was delivered): the ledger
// still charges it when it arrives after the hold's expiry and a sweep's void, once. It reports
// whether the ledger took it (now, or later: see resolve).
func (h *Hold) Settle(ctx context.Context) bool {
	decided := time.Now()
	return h.resolve(ctx, opSettle, func(ctx context.Context) (ledger.HoldResult, error) {
		return h.credits.SettleDecided(ctx, h.req.AccountID, h.req.RequestID, decided)
	})
}

// Void gives the held credit back, for reason.
func (h *Hold) Void(ctx context.Context, reason string) bool {
	return h.resolve(ctx, opVoid, func(ctx context.Context) (ledger.HoldResult, error) {
		return h.credits.Void(ctx, h.req.AccountID, h.req.RequestID, reason)
	})
}

type holdOp struct {
	name    string // "settle", "void": the ledger op
	outcome string // "settled", "voided"
}

var (
	opSettle = holdOp{"settle", "settled"}
	opVoid   = holdOp{"void", "voided"}
)

// resolve settles or voids the hold and reports whether the ledger took it: now (Available is
// then the account's), or later, when it cannot now (ErrUnavailable) and do is retried in the
// background (resolveLater). Any other failure is logged and leaves the hold to expire: never
// charged twice, at worst once too little.
func (h *Hold) resolve(ctx context.Context, op holdOp, do func(context.Context) (ledger.HoldResult, error)) (taken bool) {
	t0 := time.Now()
	res, err := do(ctx)
	h.obs.LedgerOp(op.name, time.Since(t0))
	if h.open {
		h.open = false
		h.obs.HoldsOpen(-1)
	}
	switch {
	case err == nil:
		h.obs.Resolved(op.outcome, h.req.Mode)
		h.Available = res.Available
		return true
	case errors.Is(err, ledger.ErrUnavailable):
		h.log.Warn(op.name+" later: the ledger is unavailable", zap.String("request_id", h.req.RequestID), zap.Error(err))
		h.resolveLater(op, do)
		return true
	default:
		h.log.Error(op.name+" of the hold failed; it expires on its own", zap.String("request_id", h.req.RequestID),
			zap.String("account_id", h.req.AccountID), zap.Error(err))
		return false
	}
}

// resolveLater retries do until the ledger takes it, the hold turns out resolved already (the
// expiry sweep of another instance, say), or the ledger fails otherwise. A void is given up once
// the hold's own TTL has passed (by then a sweep has voided it); a settle is retried for at least
// settleRetryFor, since the ledger still charges a hold voided as expired after the charge was
// decided (ledger.Credits.SettleDecided).
func (h *Hold) resolveLater(op holdOp, do func(context.Context) (ledger.HoldResult, error)) {
	log := h.log.With(zap.String("request_id", h.req.RequestID), zap.String("account_id", h.req.AccountID), zap.String("op", op.name))
	mode, obs := h.req.Mode, h.obs
	until, why := h.req.TTL, "the hold's TTL has passed"
	if op == opSettle && until < settleRetryFor {
		until, why = settleRetryFor, "the ledger was unavailable for "+settleRetryFor.String()
	}
	RetryLater(log, op.name, time.Now().Add(until), why, func(ctx context.Context) error {
		res, err := do(ctx)
		switch {
		case err != nil:
			return err
		case res.Repeated:
			log.Warn("the hold was resolved meanwhile by another (an expiry sweep?)", zap.String("state", string(res.State)))
		default:
			obs.Resolved(op.outcome, mode)
			log.Info("the ledger took the delayed " + op.name)
		}
		return nil
	})
}
