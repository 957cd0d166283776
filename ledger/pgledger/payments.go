package pgledger

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Unmatched payments in the PostgreSQL engine (migrations/00005_payments.sql), shared
// by every instance. The primary key on reference makes a payment recorded once: an insert that
// meets it changes nothing, and the row it met is read and reported. A resolution is an update
// conditional on resolved IS NULL, so of resolvers racing on any instances one changes the row
// and the others find it resolved.

const pgPaymentCols = "reference, event, account_id, package, credits, amount_cents, currency, problem, detail, created, resolved, resolution"

type paymentRow struct {
	p        ledger.UnmatchedPayment
	created  int64
	resolved *int64
}

func (r *paymentRow) dest() []any {
	p := &r.p
	return []any{&p.Reference, &p.Event, &p.AccountID, &p.Package, &p.Credits, &p.AmountCents, &p.Currency,
		&p.Problem, &p.Detail, &r.created, &r.resolved, &p.Resolution}
}

func scanPayment(row pgx.CollectableRow) (ledger.UnmatchedPayment, error) {
	var r paymentRow
	err := row.Scan(r.dest()...)
	r.p.Created, r.p.Resolved = pgTime(r.created), pgTimeOrZero(r.resolved)
	return r.p, err
}

// RecordUnmatchedPayment stores a payment that credited nothing, once per reference.
func (s *Postgres) RecordUnmatchedPayment(ctx context.Context, p ledger.UnmatchedPayment) (ledger.UnmatchedPayment, bool, error) {
	if err := ledger.CheckUnmatchedPayment(p); err != nil {
		return ledger.UnmatchedPayment{}, false, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.UnmatchedPayment{}, false, err
	}
	defer done()
	rows, _ := s.pool.Query(wctx, `INSERT INTO unmatched_payments
			(reference, event, account_id, package, credits, amount_cents, currency, problem, detail, created)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (reference) DO NOTHING
		RETURNING `+pgPaymentCols,
		p.Reference, p.Event, p.AccountID, p.Package, p.Credits, p.AmountCents, p.Currency, p.Problem, p.Detail,
		s.now().UnixNano())
	recs, err := pgx.CollectRows(rows, scanPayment)
	if err != nil {
		return ledger.UnmatchedPayment{}, false, pgErr(ctx, "recording an unmatched payment", err)
	}
	if len(recs) == 1 {
		return recs[0], false, nil
	}
	// The reference was recorded before (its insert has committed: ours waited for it).
	first, err := s.payment(ctx, wctx, p.Reference)
	return first, err == nil, err
}

// UnmatchedPayments lists the payments, newest first.
func (s *Postgres) UnmatchedPayments(ctx context.Context, openOnly bool, limit int) ([]ledger.UnmatchedPayment, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	// Newest first, by reference among those of one time: Badger's order (comparePayments).
	rows, _ := s.pool.Query(qctx, `SELECT `+pgPaymentCols+` FROM unmatched_payments
		WHERE NOT $1 OR resolved IS NULL ORDER BY created DESC, reference LIMIT $2`, openOnly, limit)
	out, err := pgx.CollectRows(rows, scanPayment)
	if err != nil {
		return nil, pgErr(ctx, "listing unmatched payments", err)
	}
	return out, nil
}

// ResolveUnmatchedPayment marks a payment resolved, once.
func (s *Postgres) ResolveUnmatchedPayment(ctx context.Context, reference, note string) (ledger.UnmatchedPayment, bool, error) {
	if err := ledger.CheckResolvePayment(reference, note); err != nil {
		return ledger.UnmatchedPayment{}, false, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.UnmatchedPayment{}, false, err
	}
	defer done()
	rows, _ := s.pool.Query(wctx, `UPDATE unmatched_payments SET resolved = $2, resolution = $3
		WHERE reference = $1 AND resolved IS NULL RETURNING `+pgPaymentCols, reference, s.now().UnixNano(), note)
	recs, err := pgx.CollectRows(rows, scanPayment)
	if err != nil {
		return ledger.UnmatchedPayment{}, false, pgErr(ctx, "resolving an unmatched payment", err)
	}
	if len(recs) == 1 {
		return recs[0], false, nil
	}
	// Nothing open had the reference: it is resolved already, or unknown.
	p, err := s.payment(ctx, wctx, reference)
	return p, err == nil, err
}

// payment reads the record of reference in a call admitted already (qctx); ErrNotFound when
// there is none.
func (s *Postgres) payment(ctx, qctx context.Context, reference string) (ledger.UnmatchedPayment, error) {
	rows, _ := s.pool.Query(qctx, `SELECT `+pgPaymentCols+` FROM unmatched_payments WHERE reference = $1`, reference)
	recs, err := pgx.CollectRows(rows, scanPayment)
	switch {
	case err != nil:
		return ledger.UnmatchedPayment{}, pgErr(ctx, "reading an unmatched payment", err)
	case len(recs) == 0:
		return ledger.UnmatchedPayment{}, fmt.Errorf("unmatched payment %q: %w", reference, ledger.ErrNotFound)
	}
	return recs[0], nil
}
