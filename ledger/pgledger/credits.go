package pgledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Credits of the PostgreSQL engine besides holds (holds.go): grants, purchases and
// adjustments, balances, the purchase list and test-credit refills. Grants and refills are calls
// of ledger_grant and ledger_refill through the group committer, like holds.

var (
	pgGrantSQL = `SELECT r.o_outcome, ` + pgList("(r.o_entry).", pgEntryCols, true) + `, ` +
		pgList("(r.o_account).", pgBalanceCols, true) +
		` FROM ledger_grant($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) r`
	pgRefillSQL = `SELECT r.o_outcome, coalesce(r.o_credits, 0), ` + pgList("(r.o_account).", pgBalanceCols, true) +
		` FROM ledger_refill($1, $2, $3) r`
)

// Grant adds credits (grant, purchase) or adds or removes them (adjustment). A Reference already
// used on the account, by any instance, credits nothing and returns the first entry with
// Repeated set: concurrent deliveries of one payment event credit once.
func (s *Postgres) Grant(ctx context.Context, req ledger.GrantRequest) (ledger.GrantResult, error) {
	if err := ledger.CheckGrantRequest(req); err != nil {
		return ledger.GrantResult{}, err
	}
	if err := ledger.CheckLotGrant(req, s.now()); err != nil {
		return ledger.GrantResult{}, err
	}
	if err := pgStorable("grant", req.Reference, req.Reason, req.Currency); err != nil {
		return ledger.GrantResult{}, err
	}
	var expires int64 // 0: never
	if !req.Expires.IsZero() {
		expires = req.Expires.UTC().UnixNano()
	}
	if err := s.life.Begin(); err != nil {
		return ledger.GrantResult{}, err
	}
	defer s.life.End()
	var outcome string
	var e entryRow
	var b balanceRow
	scan := func(r pgx.Row) error { return r.Scan(append(append([]any{&outcome}, e.dest()...), b.dest()...)...) }
	err := s.c.enqueue(&pgCall{acct: req.AccountID, sql: pgGrantSQL, scan: scan, outcomeUnknown: true,
		args: []any{req.AccountID, string(req.Mode), string(req.Kind), req.Credits,
			req.Reference, req.Reason, req.AmountCents, req.Currency, s.now().UTC().UnixNano(), expires}}).wait()
	if err != nil {
		return ledger.GrantResult{}, err
	}
	res := ledger.GrantResult{Entry: e.entry(), Balance: b.balance(req.AccountID)}
	switch outcome {
	case "ok":
		return res, nil
	case "repeated":
		res.Repeated = true
		return res, nil
	case "not_found":
		return ledger.GrantResult{}, fmt.Errorf("account %q: %w", req.AccountID, ledger.ErrNotFound)
	case "insufficient":
		return ledger.GrantResult{}, fmt.Errorf("adjustment of %d: %w", req.Credits, ledger.ErrInsufficientCredits)
	}
	return ledger.GrantResult{}, fmt.Errorf("grant to %q: unknown outcome %q", req.AccountID, outcome)
}

// Balance returns the account's committed figures, as every instance sees them.
func (s *Postgres) Balance(ctx context.Context, accountID string) (ledger.Balance, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.Balance{}, err
	}
	defer done()
	t := s.now().UTC()
	var b balanceRow
	var hasLots, due bool
	read := func() error {
		return s.pool.QueryRow(qctx, `SELECT `+pgList("", pgBalanceCols, false)+`, has_lots,
			has_lots AND EXISTS (SELECT FROM lots WHERE account_id = $1 AND expires <= $2 AND remaining > held)
			FROM accounts WHERE id = $1`, accountID, t.UnixNano()).Scan(append(b.dest(), &hasLots, &due)...)
	}
	err = read()
	if err == nil && due {
		// Credits that expired by now leave first, in a transaction of their own (a rare write:
		// once per lot, unless the sweep came first).
		if _, err = s.pool.Exec(qctx, `SELECT ledger_expire_account($1, $2)`, accountID, t.UnixNano()); err == nil {
			err = read()
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Balance{}, fmt.Errorf("account %q: %w", accountID, ledger.ErrNotFound)
	}
	if err != nil {
		return ledger.Balance{}, pgErr(ctx, "reading balance", err)
	}
	bal := b.balance(accountID)
	if hasLots {
		lots, err := s.lotsOf(qctx, s.pool, accountID)
		if err != nil {
			return ledger.Balance{}, pgErr(ctx, "reading expiring credits", err)
		}
		bal.Expiring = ledger.ExpiringOf(lots, t)
	}
	return bal, nil
}

// lotsOf returns the account's lots (migrations/00018), sorted by ledger.SortLots.
func (s *Postgres) lotsOf(ctx context.Context, q pgQuerier, accountID string) ([]ledger.Lot, error) {
	rows, err := q.Query(ctx, `SELECT seq, amount, remaining, held, expires FROM lots WHERE account_id = $1
		ORDER BY expires, seq`, accountID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Lot, error) {
		var l ledger.Lot
		var exp int64
		err := r.Scan(&l.Seq, &l.Amount, &l.Remaining, &l.Held, &exp)
		l.Expires = pgTime(exp)
		return l, err
	})
}

// Purchases lists the account's purchase entries, newest first.
func (s *Postgres) Purchases(ctx context.Context, accountID string, limit int) ([]ledger.Entry, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	// Every purchase has a reference: the partial index entries_reference finds them without
	// reading the account's request entries.
	rows, err := s.pool.Query(qctx, `SELECT `+pgList("", pgEntryCols, false)+` FROM entries
		WHERE account_id = $1 AND reference <> '' AND kind = 'purchase' ORDER BY seq DESC LIMIT $2`, accountID, limit)
	if err != nil {
		return nil, pgErr(ctx, "listing purchases", err)
	}
	out, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, pgErr(ctx, "listing purchases", err)
	}
	if len(out) == 0 {
		return []ledger.Entry{}, s.mustExist(ctx, accountID)
	}
	return out, nil
}

// Purchase returns the account's purchase of reference: one row of the unique partial index
// entries_reference (account_id, reference), whatever the account's size. A missing account
// and a missing purchase are both ErrNotFound, so it does not ask which.
func (s *Postgres) Purchase(ctx context.Context, accountID, reference string) (ledger.Entry, error) {
	if err := ledger.CheckString("reference", reference, ledger.MaxReferenceLen, true); err != nil {
		return ledger.Entry{}, err
	}
	if err := pgStorable("reference", reference); err != nil {
		return ledger.Entry{}, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.Entry{}, err
	}
	defer done()
	// reference <> '' repeats the index's predicate: a prepared statement's generic plan cannot
	// prove it from reference = $2, and would not use the partial index without it.
	rows, err := s.pool.Query(qctx, `SELECT `+pgList("", pgEntryCols, false)+` FROM entries
		WHERE account_id = $1 AND reference = $2 AND reference <> '' AND kind = 'purchase'`, accountID, reference)
	if err != nil {
		return ledger.Entry{}, pgErr(ctx, "reading purchase", err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanEntry)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Entry{}, fmt.Errorf("purchase %q of account %q: %w", reference, accountID, ledger.ErrNotFound)
	}
	if err != nil {
		return ledger.Entry{}, pgErr(ctx, "reading purchase", err)
	}
	return e, nil
}

// mustExist returns ErrNotFound unless the account exists: listings that found nothing call it
// to tell an empty account from a missing one.
func (s *Postgres) mustExist(ctx context.Context, accountID string) error {
	qctx, cancel := s.bound(ctx)
	defer cancel()
	var ok bool
	if err := s.pool.QueryRow(qctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE id = $1)`, accountID).Scan(&ok); err != nil {
		return pgErr(ctx, "reading account", err)
	}
	if !ok {
		return fmt.Errorf("account %q: %w", accountID, ledger.ErrNotFound)
	}
	return nil
}

// RefillTestCredits tops the account's available test credits up to upTo. The check and the
// grant are one call under the account's row lock, so concurrent refills, from any instance,
// never overshoot.
func (s *Postgres) RefillTestCredits(ctx context.Context, accountID string, upTo int64) (int64, ledger.Balance, error) {
	if err := ledger.CheckRefillTarget(upTo); err != nil {
		return 0, ledger.Balance{}, err
	}
	if err := s.life.Begin(); err != nil {
		return 0, ledger.Balance{}, err
	}
	defer s.life.End()
	var outcome string
	var credits int64
	var b balanceRow
	scan := func(r pgx.Row) error { return r.Scan(append([]any{&outcome, &credits}, b.dest()...)...) }
	if err := s.c.call(accountID, pgRefillSQL, scan, accountID, upTo, s.now().UTC().UnixNano()); err != nil {
		return 0, ledger.Balance{}, err
	}
	switch outcome {
	case "ok":
		return credits, b.balance(accountID), nil
	case "not_found":
		return 0, ledger.Balance{}, fmt.Errorf("account %q: %w", accountID, ledger.ErrNotFound)
	case "disabled":
		return 0, ledger.Balance{}, ledger.ErrAccountDisabled
	}
	return 0, ledger.Balance{}, fmt.Errorf("refill of %q: unknown outcome %q", accountID, outcome)
}
