package pgledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Holds of the PostgreSQL engine: Hold (and Reserve) take a request's price, Settle and
// Void resolve it exactly once, and the sweep voids holds left open past their expiry by any
// instance. Each is one operation of the server-side function ledger_holds
// (migrations), run by the group committer (commit.go) together with the
// account's other operations of the same batch, or of ledger_hold when it is alone in its batch.

const (
	pgHoldsSQL = `SELECT o_outcome, o_state, o_available, o_credits FROM ledger_holds($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`
	// pgHoldSQL is the same for one operation, with plain values instead of arrays: ledger_hold
	// does in a few cached plans what ledger_holds does with arrays.
	pgHoldSQL = `SELECT o_outcome, o_state, o_available, o_credits FROM ledger_hold($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`
	// pgSweepPage is how many expired holds one sweep query fetches.
	pgSweepPage = 1000
)

// pgHoldOp is one operation of ledger_holds: "hold" (of credits), "settle", "void" or "expire"
// (the sweep's void), at time at (unix nanoseconds), and its outcome once done.
type pgHoldOp struct {
	op, rid, mode, key, tool, reason string
	at, expires, credits             int64
	out                              holdOutcome
}

// pgHoldsCall is the call of ledger_holds for calls, hold operations in order, or of
// ledger_hold for a lone one (the only kind there is at one caller, where ledger_holds' arrays
// would cost more than the hold).
func pgHoldsCall(calls []*pgCall) (string, []any) {
	if len(calls) == 1 {
		c := calls[0]
		h := c.hold
		return pgHoldSQL, []any{c.acct, h.at, h.op, h.rid, h.mode, h.key, h.tool, h.expires, h.reason, ledger.HeldCredits(h.credits)}
	}
	n := len(calls)
	ats, expires, credits := make([]int64, n), make([]int64, n), make([]int64, n)
	accts, ops, rids, modes := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	keys, tools, reasons := make([]string, n), make([]string, n), make([]string, n)
	for i, c := range calls {
		h := c.hold
		accts[i], ats[i], ops[i], rids[i], modes[i] = c.acct, h.at, h.op, h.rid, h.mode
		keys[i], tools[i], expires[i], reasons[i], credits[i] = h.key, h.tool, h.expires, h.reason, ledger.HeldCredits(h.credits)
	}
	return pgHoldsSQL, []any{accts, ats, ops, rids, modes, keys, tools, expires, reasons, credits}
}

// readHolds reads the rows of a pgHoldsCall into its calls' outcomes.
func readHolds(br pgx.BatchResults, calls []*pgCall) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	n := 0
	for rows.Next() {
		if n < len(calls) {
			if err := calls[n].hold.out.scan(rows); err != nil {
				rows.Close()
				return err
			}
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n != len(calls) {
		return fmt.Errorf("ledger_holds or ledger_hold returned %d rows for %d operations", n, len(calls))
	}
	return nil
}

// holdOutcome is a row of ledger_holds.
type holdOutcome struct {
	outcome, state     string
	available, credits int64
}

func (o *holdOutcome) scan(r pgx.Row) error {
	return r.Scan(&o.outcome, &o.state, &o.available, &o.credits)
}

// enqueueHold queues hold operation h of account acct.
func (s *Postgres) enqueueHold(acct string, h *pgHoldOp) *pgCall {
	return s.c.enqueue(&pgCall{acct: acct, hold: h})
}

// result turns the row into the call's result or expected error.
func (o *holdOutcome) result(acct, rid string) (ledger.HoldResult, error) {
	r := ledger.HoldResult{RequestID: rid, State: ledger.HoldState(o.state), Available: o.available, Credits: o.credits}
	switch o.outcome {
	case "ok":
		return r, nil
	case "repeated":
		r.Repeated = true
		return r, nil
	case "not_found":
		return ledger.HoldResult{}, fmt.Errorf("account %q: %w", acct, ledger.ErrNotFound)
	case "no_hold":
		return ledger.HoldResult{}, fmt.Errorf("hold %q of account %q: %w", rid, acct, ledger.ErrNotFound)
	case "disabled":
		return ledger.HoldResult{}, ledger.ErrAccountDisabled
	case "insufficient":
		return ledger.HoldResult{}, ledger.ErrInsufficientCredits
	case "member_cap":
		return ledger.HoldResult{}, ledger.ErrMemberCapReached
	}
	return ledger.HoldResult{}, fmt.Errorf("hold %q of account %q: unknown outcome %q", rid, acct, o.outcome)
}

// Hold reserves req.Credits (the request's price) of req.Mode for req.RequestID and returns once
// the hold is committed.
// Its Available is the account's available credit over all instances right after the hold. A
// repeated request id reports the hold's current state with Repeated set.
func (s *Postgres) Hold(ctx context.Context, req ledger.HoldRequest) (ledger.HoldResult, error) {
	if err := ledger.CheckHoldRequest(req); err != nil {
		return ledger.HoldResult{}, err
	}
	if err := pgStorable("hold request", req.RequestID, req.KeyID, req.Tool); err != nil {
		return ledger.HoldResult{}, err
	}
	if err := s.life.Begin(); err != nil {
		return ledger.HoldResult{}, err
	}
	defer s.life.End()
	t := s.now().UTC()
	h := &pgHoldOp{op: "hold", rid: req.RequestID, mode: string(req.Mode), key: req.KeyID, tool: req.Tool,
		credits: req.Credits, at: t.UnixNano(), expires: t.Add(cmp.Or(req.TTL, s.opts.HoldTTL)).UnixNano()}
	if err := s.enqueueHold(req.AccountID, h).wait(); err != nil {
		return ledger.HoldResult{}, err
	}
	if e, ok := keyBudgetOutcome(h.out, t); ok {
		return ledger.HoldResult{}, e
	}
	if h.out.outcome == "ok" && req.KeyID != "" {
		s.used.note(req.KeyID, t.UnixNano()) // only a request that got its hold counts as the key's use
	}
	return h.out.result(req.AccountID, req.RequestID)
}

// Reserve is Hold: on PostgreSQL it too returns only once the hold is committed. A hold exists
// for other instances (and survives this one) only once committed, and a hold that cannot be
// written is not a hold, so there is nothing to return earlier; the group committer keeps the
// wait to about one commit.
func (s *Postgres) Reserve(ctx context.Context, req ledger.HoldRequest) (ledger.HoldResult, error) {
	return s.Hold(ctx, req)
}

// Settle charges the held credits. A hold resolved already (by any instance, or the sweep)
// reports its first outcome with Repeated set.
func (s *Postgres) Settle(ctx context.Context, accountID, requestID string) (ledger.HoldResult, error) {
	return s.resolve(accountID, requestID, "settle", "")
}

// SettleDecided is Settle of a charge decided at decided: a hold that a sweep (of any instance)
// voided as expired although decided is before its expiry is charged after all, once
// (ledger_settle_late, migrations/00014).
func (s *Postgres) SettleDecided(ctx context.Context, accountID, requestID string, decided time.Time) (ledger.HoldResult, error) {
	r, err := s.Settle(ctx, accountID, requestID)
	if err != nil || !r.Repeated || r.State != ledger.HoldVoided || decided.IsZero() {
		return r, err
	}
	return s.settleLate(ctx, accountID, requestID, decided)
}

// settleLate runs ledger_settle_late, in a transaction of its own: it is rare (a stall longer
// than the hold's life), so it does not ride in the group committer's batches.
func (s *Postgres) settleLate(ctx context.Context, accountID, requestID string, decided time.Time) (ledger.HoldResult, error) {
	if err := s.life.Begin(); err != nil {
		return ledger.HoldResult{}, err
	}
	defer s.life.End()
	qctx, cancel := s.bound(context.WithoutCancel(ctx))
	defer cancel()
	var o holdOutcome
	err := s.pool.QueryRow(qctx, `SELECT o_outcome, o_state, o_available, (SELECT credits FROM holds WHERE account_id = $1 AND request_id = $2)
		FROM ledger_settle_late($1, $2, $3, $4)`,
		accountID, requestID, decided.UnixNano(), s.now().UTC().UnixNano()).Scan(&o.outcome, &o.state, &o.available, &o.credits)
	if err != nil {
		return ledger.HoldResult{}, pgErr(ctx, "settling an expired hold", err)
	}
	return o.result(accountID, requestID)
}

// Void releases the held credits without charging them. A hold resolved already reports its first
// outcome with Repeated set.
func (s *Postgres) Void(ctx context.Context, accountID, requestID, reason string) (ledger.HoldResult, error) {
	return s.resolve(accountID, requestID, "void", reason)
}

// resolve settles or voids a hold. The caller's context is not consulted (a handler voids holds
// after its client went away); the committer's batch has its own deadline.
func (s *Postgres) resolve(accountID, requestID, op, reason string) (ledger.HoldResult, error) {
	if err := ledger.CheckResolve(requestID, reason); err != nil {
		return ledger.HoldResult{}, err
	}
	if err := pgStorable("hold resolution", requestID, reason); err != nil {
		return ledger.HoldResult{}, err
	}
	if err := s.life.Begin(); err != nil {
		return ledger.HoldResult{}, err
	}
	defer s.life.End()
	h := &pgHoldOp{op: op, rid: requestID, reason: reason, at: s.now().UTC().UnixNano()}
	if err := s.enqueueHold(accountID, h).wait(); err != nil {
		return ledger.HoldResult{}, err
	}
	return h.out.result(accountID, requestID)
}

// sweep voids, with reason "expired", every open hold of every instance whose expiry has passed
// by the ledger clock, and drops expired sessions and Idempotency-Key records. It returns how
// many holds it voided. Each void is conditional (ledger_holds' "expire"): a hold
// that another instance settled or voided meanwhile, or is settling now (its account's row is
// locked until that commits), is left as that resolver leaves it, so a hold is never both
// settled and voided. Several instances may sweep at once.
func (s *Postgres) sweep(ctx context.Context) (int, error) {
	if err := s.life.Begin(); err != nil {
		return 0, err
	}
	defer s.life.End()
	t := s.now().UTC()
	voided := 0
	for {
		due, err := s.expiredHolds(ctx, t)
		if err != nil {
			return voided, err
		}
		ops := make([]*pgHoldOp, len(due))
		calls := make([]*pgCall, len(due))
		for i, d := range due {
			ops[i] = &pgHoldOp{op: "expire", rid: d[1], at: t.UnixNano()}
			calls[i] = s.enqueueHold(d[0], ops[i])
		}
		progress := 0
		for i, c := range calls {
			if err := c.wait(); err != nil {
				return voided, err
			}
			switch ops[i].out.outcome {
			case "ok":
				voided++
				progress++
			case "repeated":
				progress++
			}
		}
		if len(due) < pgSweepPage || progress == 0 {
			break
		}
	}
	if err := s.expireLots(ctx, t); err != nil {
		return voided, err
	}
	return voided, s.purge(ctx, t)
}

// expireLots expires, at t, the credits of every account whose lots are due (migrations/00018),
// one account per transaction. Several instances may do it at once: each account's expiry runs
// under its row lock and finds nothing left to do the second time.
func (s *Postgres) expireLots(ctx context.Context, t time.Time) error {
	for {
		qctx, cancel := s.bound(ctx)
		rows, err := s.pool.Query(qctx, `SELECT DISTINCT account_id FROM lots WHERE expires <= $1 AND remaining > held LIMIT $2`,
			t.UnixNano(), pgSweepPage)
		var due []string
		if err == nil {
			due, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		cancel()
		if err != nil {
			return pgErr(ctx, "listing expired credits", err)
		}
		for _, acct := range due {
			qctx, cancel := s.bound(ctx)
			_, err := s.pool.Exec(qctx, `SELECT ledger_expire_account($1, $2)`, acct, t.UnixNano())
			cancel()
			if err != nil {
				return pgErr(ctx, "expiring credits", err)
			}
		}
		if len(due) < pgSweepPage {
			return nil
		}
	}
}

// expiredHolds lists up to pgSweepPage open holds past their expiry at t, as (account, request).
func (s *Postgres) expiredHolds(ctx context.Context, t time.Time) ([][2]string, error) {
	qctx, cancel := s.bound(ctx)
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

// purge drops sessions and Idempotency-Key records that expired by t (they are ignored once
// expired anyway, this only reclaims their space), and kept generations whose window ended.
func (s *Postgres) purge(ctx context.Context, t time.Time) error {
	qctx, cancel := s.bound(context.WithoutCancel(ctx))
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM sessions WHERE expires <= $1`, t.UnixNano())
	b.Queue(`DELETE FROM idempotency WHERE created <= $1`, t.Add(-ledger.IdempotencyTTL).UnixNano())
	b.Queue(`DELETE FROM generations WHERE expires <= $1`, t.UnixNano())
	return pgErr(ctx, "dropping expired sessions, Idempotency-Keys and generations", s.pool.SendBatch(qctx, b).Close())
}

// GetHold returns the account's hold of requestID.
func (s *Postgres) GetHold(ctx context.Context, accountID, requestID string) (ledger.HoldInfo, error) {
	if err := ledger.CheckResolve(requestID, ""); err != nil {
		return ledger.HoldInfo{}, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.HoldInfo{}, err
	}
	defer done()
	var h ledger.HoldInfo
	var mode, state string
	var created int64
	var resolved *int64
	err = s.pool.QueryRow(qctx, `SELECT account_id, request_id, mode, state, key_id, tool, credits, created, resolved, reason
		FROM holds WHERE account_id = $1 AND request_id = $2`, accountID, requestID).
		Scan(&h.AccountID, &h.RequestID, &mode, &state, &h.KeyID, &h.Tool, &h.Credits, &created, &resolved, &h.Reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.HoldInfo{}, fmt.Errorf("hold %q of account %q: %w", requestID, accountID, ledger.ErrNotFound)
	}
	if err != nil {
		return ledger.HoldInfo{}, pgErr(ctx, "reading hold", err)
	}
	h.Mode, h.State, h.Created, h.Resolved = ledger.Mode(mode), ledger.HoldState(state), pgTime(created), pgTimeOrZero(resolved)
	return h, nil
}
