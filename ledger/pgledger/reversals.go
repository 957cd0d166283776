package pgledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Money that flows back in the PostgreSQL engine (migrations/00007_reversals.sql),
// shared by every instance. A reversal is one transaction that locks the account's row (as
// every change of its credits does, so it is ordered with holds and grants on any instance) and
// then the payment's row (which orders reversals of a payment that credited no account), reads
// the reversal of that id on current data, and decides by the same rule as every engine
// (reverse, ledger/reversals.go): of instances racing with one event, one applies it, the others wait
// for its lock and find it applied. The primary key of reversals backs this up.

const (
	pgPayCols = "id, reference, account_id, package, credits, amount_cents, currency, status, refunded_cents, " +
		"refunded_credits, disputed_credits, created, updated, disputed_cents"
	pgReversalCols = "id, kind, payment, account_id, reference, amount_cents, currency, credits, status, reason, event, created, updated"
)

func scanPay(row pgx.CollectableRow) (ledger.Payment, error) {
	var p ledger.Payment
	var created, updated int64
	err := row.Scan(&p.ID, &p.Reference, &p.AccountID, &p.Package, &p.Credits, &p.AmountCents, &p.Currency, &p.Status,
		&p.RefundedCents, &p.RefundedCredits, &p.DisputedCredits, &created, &updated, &p.DisputedCents)
	p.Created, p.Updated = pgTime(created), pgTime(updated)
	return p, err
}

func payArgs(p ledger.Payment) []any {
	return []any{p.ID, p.Reference, p.AccountID, p.Package, p.Credits, p.AmountCents, p.Currency, string(p.Status),
		p.RefundedCents, p.RefundedCredits, p.DisputedCredits, p.Created.UnixNano(), p.Updated.UnixNano(), p.DisputedCents}
}

func scanReversal(row pgx.CollectableRow) (ledger.Reversal, error) {
	var r ledger.Reversal
	var created, updated int64
	err := row.Scan(&r.ID, &r.Kind, &r.Payment, &r.AccountID, &r.Reference, &r.AmountCents, &r.Currency, &r.Credits,
		&r.Status, &r.Reason, &r.Event, &created, &updated)
	r.Created, r.Updated = pgTime(created), pgTime(updated)
	return r, err
}

// pgOne is the one row of rows, ok false when there is none.
func pgOne[T any](rows pgx.Rows, err error, scan pgx.RowToFunc[T]) (T, bool, error) {
	var zero T
	if err != nil {
		return zero, false, err
	}
	v, err := pgx.CollectExactlyOneRow(rows, scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, false, nil
	}
	return v, err == nil, err
}

// RecordPayment stores or advances a payment: an insert that meets the primary key reads the
// row under its lock and advances it, so of instances racing, one moves it.
func (s *Postgres) RecordPayment(ctx context.Context, p ledger.Payment) (ledger.Payment, bool, error) {
	if err := ledger.CheckPayment(p); err != nil {
		return ledger.Payment{}, false, err
	}
	if err := pgStorable("payment", p.ID, p.Reference, p.AccountID, p.Package, p.Currency); err != nil {
		return ledger.Payment{}, false, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.Payment{}, false, err
	}
	defer done()
	var rec ledger.Payment
	var repeated bool
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		fresh, _ := ledger.AdvancePayment(nil, p, s.now().UTC())
		rows, err := tx.Query(wctx, `INSERT INTO payments (`+pgPayCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
			ON CONFLICT (id) DO NOTHING RETURNING `+pgPayCols, payArgs(fresh)...)
		ins, ok, err := pgOne(rows, err, scanPay)
		if err != nil || ok {
			rec = ins
			return err
		}
		rows, err = tx.Query(wctx, `SELECT `+pgPayCols+` FROM payments WHERE id = $1 FOR UPDATE`, p.ID)
		old, ok, err := pgOne(rows, err, scanPay)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("payment %q vanished", p.ID)
		}
		if rec, repeated = ledger.AdvancePayment(&old, p, s.now().UTC()); repeated {
			return nil
		}
		_, err = tx.Exec(wctx, `UPDATE payments SET reference = $2, account_id = $3, package = $4, credits = $5,
			amount_cents = $6, currency = $7, status = $8, updated = $9 WHERE id = $1`,
			rec.ID, rec.Reference, rec.AccountID, rec.Package, rec.Credits, rec.AmountCents, rec.Currency, string(rec.Status),
			rec.Updated.UnixNano())
		return err
	})
	if err != nil {
		return ledger.Payment{}, false, pgErr(ctx, "recording a payment", err)
	}
	return rec, repeated, nil
}

// GetPayment returns a payment.
func (s *Postgres) GetPayment(ctx context.Context, id string) (ledger.Payment, error) {
	return s.paymentWhere(ctx, "payment id", "id", id, "payment %q")
}

// PaymentOf returns the payment of a purchase reference (index payments_reference).
func (s *Postgres) PaymentOf(ctx context.Context, reference string) (ledger.Payment, error) {
	return s.paymentWhere(ctx, "reference", "reference", reference, "payment of %q")
}

// paymentWhere reads the first payment whose column (id or reference, both indexed) is value;
// what names value in argument errors, notFound (with %q for value) the payment not found.
func (s *Postgres) paymentWhere(ctx context.Context, what, column, value, notFound string) (ledger.Payment, error) {
	if err := ledger.CheckString(what, value, ledger.MaxReferenceLen, true); err != nil {
		return ledger.Payment{}, err
	}
	if err := pgStorable(what, value); err != nil {
		return ledger.Payment{}, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.Payment{}, err
	}
	defer done()
	rows, err := s.pool.Query(qctx, `SELECT `+pgPayCols+` FROM payments WHERE `+column+` = $1 ORDER BY created LIMIT 1`, value)
	p, ok, err := pgOne(rows, err, scanPay)
	switch {
	case err != nil:
		return ledger.Payment{}, pgErr(ctx, "reading a payment", err)
	case !ok:
		return ledger.Payment{}, fmt.Errorf(notFound+": %w", value, ledger.ErrNotFound)
	}
	return p, nil
}

// AccountPayments lists an account's payments, newest first (by id among those of one time:
// Badger's order).
func (s *Postgres) AccountPayments(ctx context.Context, accountID string, limit int) ([]ledger.Payment, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	if err := pgStorable("account id", accountID); err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgPayCols+` FROM payments WHERE account_id = $1 AND account_id <> ''
		ORDER BY created DESC, id LIMIT $2`, accountID, limit)
	out, err := pgx.CollectRows(rows, scanPay)
	if err != nil {
		return nil, pgErr(ctx, "listing payments", err)
	}
	return out, nil
}

// Reverse applies one refund or dispute event, once.
func (s *Postgres) Reverse(ctx context.Context, req ledger.ReversalRequest) (ledger.ReversalResult, error) {
	if err := ledger.CheckReversal(req); err != nil {
		return ledger.ReversalResult{}, err
	}
	if err := pgStorable("reversal", req.ID, req.Payment, req.Currency, req.Reason, req.Event); err != nil {
		return ledger.ReversalResult{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.ReversalResult{}, err
	}
	defer done()
	var res ledger.ReversalResult
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		res = ledger.ReversalResult{}
		var acct string
		err := tx.QueryRow(wctx, `SELECT account_id FROM payments WHERE id = $1`, req.Payment).Scan(&acct)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("payment %q of %s %q: %w", req.Payment, req.Kind, req.ID, ledger.ErrNotFound)
		}
		if err != nil {
			return err
		}
		// The account's row first, as every change of its credits takes it.
		var b balanceRow
		var nextSeq, reversed int64
		hasAcct := false
		if acct != "" {
			err := tx.QueryRow(wctx, `SELECT `+pgList("", pgBalanceCols, false)+`, next_seq, reversed FROM accounts
				WHERE id = $1 FOR NO KEY UPDATE`, acct).Scan(append(b.dest(), &nextSeq, &reversed)...)
			switch {
			case err == nil:
				hasAcct = true
				res.Balance = b.balance(acct)
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
		}
		rows, err := tx.Query(wctx, `SELECT `+pgPayCols+` FROM payments WHERE id = $1 FOR UPDATE`, req.Payment)
		p, _, err := pgOne(rows, err, scanPay)
		if err != nil {
			return err
		}
		if err := ledger.CheckReversible(p, req); err != nil {
			return err
		}
		rows, err = tx.Query(wctx, `SELECT `+pgReversalCols+` FROM reversals WHERE id = $1`, req.ID)
		old, ok, err := pgOne(rows, err, scanReversal)
		if err != nil {
			return err
		}
		var prev *ledger.Reversal
		if ok {
			prev = &old
		}
		if err := ledger.CheckSameReversal(prev, req); err != nil {
			return err
		}
		st := ledger.Reverse(p, prev, req, s.now().UTC())
		res.Reversal, res.Payment, res.Repeated = st.Reversal, st.Payment, st.Repeated
		if st.Repeated {
			return nil
		}
		if st.Entry {
			if !hasAcct {
				return fmt.Errorf("account %q of payment %q: %w", acct, p.ID, ledger.ErrNotFound)
			}
			e := st.EntryOf()
			e.AccountID, e.Seq, e.Amount, e.Time = acct, uint64(nextSeq), st.Delta, st.Reversal.Updated
			e.BalanceAfter = b.bal + st.Delta
			e.AvailableAfter = e.BalanceAfter - b.held
			if _, err := tx.Exec(wctx, `INSERT INTO entries (account_id, seq, kind, mode, amount, balance_after,
					available_after, reference, reason, amount_cents, currency, at)
				VALUES ($1, $2, $3, 'live', $4, $5, $6, $7, $8, $9, $10, $11)`,
				acct, nextSeq, string(e.Kind), e.Amount, e.BalanceAfter, e.AvailableAfter, e.Reference, e.Reason,
				e.AmountCents, e.Currency, e.Time.UnixNano()); err != nil {
				return err
			}
			if _, err := tx.Exec(wctx, `UPDATE accounts SET balance = balance + $2, reversed = reversed - $2,
				next_seq = next_seq + 1 WHERE id = $1`, acct, st.Delta); err != nil {
				return err
			}
			if st.Delta < 0 {
				// What the refunded purchase gave, if still there, is what goes first.
				if _, err := tx.Exec(wctx, `UPDATE lots SET remaining = remaining - least($3, remaining - held)
					WHERE account_id = $1 AND seq = (SELECT seq FROM entries WHERE account_id = $1 AND reference = $2
						AND reference <> '' AND kind = 'purchase')`, acct, p.Reference, -st.Delta); err != nil {
					return err
				}
			}
			b.bal += st.Delta
			res.Entry, res.Balance = e, b.balance(acct)
		}
		r := st.Reversal
		if _, err := tx.Exec(wctx, `INSERT INTO reversals (`+pgReversalCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
			ON CONFLICT (id) DO UPDATE SET credits = excluded.credits, status = excluded.status,
				event = excluded.event, updated = excluded.updated`,
			r.ID, string(r.Kind), r.Payment, r.AccountID, r.Reference, r.AmountCents, r.Currency, r.Credits, r.Status,
			r.Reason, r.Event, r.Created.UnixNano(), r.Updated.UnixNano()); err != nil {
			return err
		}
		p = st.Payment
		_, err = tx.Exec(wctx, `UPDATE payments SET refunded_cents = $2, refunded_credits = $3, disputed_credits = $4,
			updated = $5, disputed_cents = $6 WHERE id = $1`,
			p.ID, p.RefundedCents, p.RefundedCredits, p.DisputedCredits, p.Updated.UnixNano(), p.DisputedCents)
		return err
	})
	if err != nil {
		if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidArgument) {
			return ledger.ReversalResult{}, err
		}
		return ledger.ReversalResult{}, pgErr(ctx, "applying a "+string(req.Kind), err)
	}
	return res, nil
}

// ListReversals lists refunds and disputes, last changed first (by id among those of one time).
func (s *Postgres) ListReversals(ctx context.Context, accountID string, kind ledger.ReversalKind, limit int) ([]ledger.Reversal, error) {
	limit, err := ledger.ReversalList(kind, limit)
	if err != nil {
		return nil, err
	}
	if err := pgStorable("account id", accountID); err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgReversalCols+` FROM reversals
		WHERE ($1 = '' OR account_id = $1) AND ($2 = '' OR kind = $2) ORDER BY updated DESC, id LIMIT $3`,
		accountID, string(kind), limit)
	out, err := pgx.CollectRows(rows, scanReversal)
	if err != nil {
		return nil, pgErr(ctx, "listing reversals", err)
	}
	return out, nil
}
