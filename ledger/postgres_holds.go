package ledger

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Holds of the PostgreSQL engine: Hold (and Reserve) take one credit for a request, Settle and
// Void resolve it exactly once, and the sweep voids holds left open past their expiry by any
// instance. Each is one call of a server-side function (ledger_hold, ledger_resolve in
// postgres_migrations) run by the group committer (postgres_commit.go).

const (
	pgHoldSQL    = `SELECT o_outcome, coalesce(o_state, ''), coalesce(o_available, 0) FROM ledger_hold($1, $2, $3, $4, $5, $6, $7)`
	pgResolveSQL = `SELECT o_outcome, coalesce(o_state, ''), coalesce(o_available, 0) FROM ledger_resolve($1, $2, $3, $4, $5, $6)`
	// pgSweepPage is how many expired holds one sweep query fetches.
	pgSweepPage = 1000
)

// holdOutcome is the row of ledger_hold and ledger_resolve.
type holdOutcome struct {
	outcome, state string
	available      int64
}

func (o *holdOutcome) scan(r pgx.Row) error { return r.Scan(&o.outcome, &o.state, &o.available) }

// result turns the row into the call's result or expected error.
func (o *holdOutcome) result(acct, rid string) (HoldResult, error) {
	r := HoldResult{RequestID: rid, State: HoldState(o.state), Available: o.available}
	switch o.outcome {
	case "ok":
		return r, nil
	case "repeated":
		r.Repeated = true
		return r, nil
	case "not_found":
		return HoldResult{}, fmt.Errorf("account %q: %w", acct, ErrNotFound)
	case "no_hold":
		return HoldResult{}, fmt.Errorf("hold %q of account %q: %w", rid, acct, ErrNotFound)
	case "disabled":
		return HoldResult{}, ErrAccountDisabled
	case "insufficient":
		return HoldResult{}, ErrInsufficientCredits
	}
	return HoldResult{}, fmt.Errorf("hold %q of account %q: unknown outcome %q", rid, acct, o.outcome)
}

// Hold reserves one credit of req.Mode for req.RequestID and returns once the hold is committed.
// Its Available is the account's available credit over all instances right after the hold. A
// repeated request id reports the hold's current state with Repeated set.
func (s *Postgres) Hold(ctx context.Context, req HoldRequest) (HoldResult, error) {
	if err := checkHoldRequest(req); err != nil {
		return HoldResult{}, err
	}
	if err := pgStorable("hold request", req.RequestID, req.KeyID, req.Tool); err != nil {
		return HoldResult{}, err
	}
	if err := s.begin(); err != nil {
		return HoldResult{}, err
	}
	defer s.end()
	t := now().UTC()
	expires := t.Add(cmp.Or(req.TTL, s.opts.HoldTTL))
	var o holdOutcome
	err := s.c.call(req.AccountID, pgHoldSQL, o.scan,
		req.AccountID, req.RequestID, string(req.Mode), req.KeyID, req.Tool, t.UnixNano(), expires.UnixNano())
	if err != nil {
		return HoldResult{}, err
	}
	return o.result(req.AccountID, req.RequestID)
}

// Reserve is Hold: on PostgreSQL it too returns only once the hold is committed. A hold exists
// for other instances (and survives this one) only once committed, and a hold that cannot be
// written is not a hold, so there is nothing to return earlier; the group committer keeps the
// wait to about one commit.
func (s *Postgres) Reserve(ctx context.Context, req HoldRequest) (HoldResult, error) {
	return s.Hold(ctx, req)
}

// Settle charges the held credit. A hold resolved already (by any instance, or the sweep)
// reports its first outcome with Repeated set.
func (s *Postgres) Settle(ctx context.Context, accountID, requestID string) (HoldResult, error) {
	return s.resolve(accountID, requestID, HoldSettled, "")
}

// Void releases the held credit without charging it. A hold resolved already reports its first
// outcome with Repeated set.
func (s *Postgres) Void(ctx context.Context, accountID, requestID, reason string) (HoldResult, error) {
	return s.resolve(accountID, requestID, HoldVoided, reason)
}

// resolve settles or voids a hold. The caller's context is not consulted (a handler voids holds
// after its client went away); the committer's batch has its own deadline.
func (s *Postgres) resolve(accountID, requestID string, to HoldState, reason string) (HoldResult, error) {
	if err := checkResolve(requestID, reason); err != nil {
		return HoldResult{}, err
	}
	if err := pgStorable("hold resolution", requestID, reason); err != nil {
		return HoldResult{}, err
	}
	if err := s.begin(); err != nil {
		return HoldResult{}, err
	}
	defer s.end()
	o, err := s.enqueueResolve(accountID, requestID, to, reason, false).wait()
	if err != nil {
		return HoldResult{}, err
	}
	return o.result(accountID, requestID)
}

// pendingResolve is a queued ledger_resolve call.
type pendingResolve struct {
	op *pgCall
	o  holdOutcome
}

func (p *pendingResolve) wait() (*holdOutcome, error) { return &p.o, p.op.wait() }

func (s *Postgres) enqueueResolve(acct, rid string, to HoldState, reason string, expiredOnly bool) *pendingResolve {
	p := &pendingResolve{}
	p.op = s.c.enqueue(acct, pgResolveSQL, p.o.scan, acct, rid, string(to), reason, now().UTC().UnixNano(), expiredOnly)
	return p
}

// sweep voids, with reason "expired", every open hold of every instance whose expiry has passed
// by the ledger clock, and drops expired sessions and Idempotency-Key records. It returns how
// many holds it voided. Each void is conditional (ledger_resolve with p_expired_only): a hold
// that another instance settled or voided meanwhile, or is settling now (its account's row is
// locked until that commits), is left as that resolver leaves it, so a hold is never both
// settled and voided. Several instances may sweep at once.
func (s *Postgres) sweep(ctx context.Context) (int, error) {
	if err := s.begin(); err != nil {
		return 0, err
	}
	defer s.end()
	t := now().UTC()
	voided := 0
	for {
		due, err := s.expiredHolds(ctx, t)
		if err != nil {
			return voided, err
		}
		pending := make([]*pendingResolve, len(due))
		for i, h := range due {
			pending[i] = s.enqueueResolve(h[0], h[1], HoldVoided, "expired", true)
		}
		progress := 0
		for _, p := range pending {
			o, err := p.wait()
			if err != nil {
				return voided, err
			}
			if o.outcome == "ok" || o.outcome == "repeated" {
				progress++
			}
			if o.outcome == "ok" {
				voided++
			}
		}
		if len(due) < pgSweepPage || progress == 0 {
			break
		}
	}
	return voided, s.purge(ctx, t)
}

// expiredHolds lists up to pgSweepPage open holds past their expiry at t, as (account, request).
func (s *Postgres) expiredHolds(ctx context.Context, t time.Time) ([][2]string, error) {
	qctx, cancel := s.readCtx(ctx)
	defer cancel()
	rows, err := s.pool.Query(qctx, `SELECT account_id, request_id FROM holds
		WHERE state = 'open' AND expires <= $1 ORDER BY expires LIMIT $2`, t.UnixNano(), pgSweepPage)
	if err != nil {
		return nil, pgErr(ctx, "listing expired holds", err)
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var h [2]string
		return h, r.Scan(&h[0], &h[1])
	})
	return due, pgErr(ctx, "listing expired holds", err)
}

// purge drops sessions and Idempotency-Key records that expired by t: they are ignored once
// expired anyway, this only reclaims their space.
func (s *Postgres) purge(ctx context.Context, t time.Time) error {
	qctx, cancel := s.writeCtx(ctx)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM sessions WHERE expires <= $1`, t.UnixNano())
	b.Queue(`DELETE FROM idempotency WHERE created <= $1`, t.Add(-IdempotencyTTL).UnixNano())
	return pgErr(ctx, "dropping expired sessions and Idempotency-Keys", s.pool.SendBatch(qctx, b).Close())
}
