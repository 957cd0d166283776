package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Credits of the PostgreSQL engine besides holds (postgres_holds.go): grants, purchases and
// adjustments, balances, the purchase list and test-credit refills. Grants and refills are calls
// of ledger_grant and ledger_refill through the group committer, like holds.

var (
	pgGrantSQL = `SELECT r.o_outcome, ` + pgList("(r.o_entry).", pgEntryCols, true) + `, ` +
		pgList("(r.o_account).", pgBalanceCols, true) +
		` FROM ledger_grant($1, $2, $3, $4, $5, $6, $7, $8, $9) r`
	pgRefillSQL = `SELECT r.o_outcome, coalesce(r.o_credits, 0), ` + pgList("(r.o_account).", pgBalanceCols, true) +
		` FROM ledger_refill($1, $2, $3) r`
)

// Grant adds credits (grant, purchase) or adds or removes them (adjustment). A Reference already
// used on the account, by any instance, credits nothing and returns the first entry with
// Repeated set: concurrent deliveries of one payment event credit once.
func (s *Postgres) Grant(ctx context.Context, req GrantRequest) (GrantResult, error) {
	if err := CheckGrantRequest(req); err != nil {
		return GrantResult{}, err
	}
	if err := pgStorable("grant", req.Reference, req.Reason, req.Currency); err != nil {
		return GrantResult{}, err
	}
	if err := s.life.Begin(); err != nil {
		return GrantResult{}, err
	}
	defer s.life.End()
	var outcome string
	var e entryRow
	var b balanceRow
	scan := func(r pgx.Row) error { return r.Scan(append(append([]any{&outcome}, e.dest()...), b.dest()...)...) }
	err := s.c.enqueue(&pgCall{acct: req.AccountID, sql: pgGrantSQL, scan: scan, outcomeUnknown: true,
		args: []any{req.AccountID, string(req.Mode), string(req.Kind), req.Credits,
			req.Reference, req.Reason, req.AmountCents, req.Currency, s.now().UTC().UnixNano()}}).wait()
	if err != nil {
		return GrantResult{}, err
	}
	res := GrantResult{Entry: e.entry(), Balance: b.balance(req.AccountID)}
	switch outcome {
	case "ok":
		return res, nil
	case "repeated":
		res.Repeated = true
		return res, nil
	case "not_found":
		return GrantResult{}, fmt.Errorf("account %q: %w", req.AccountID, ErrNotFound)
	case "insufficient":
		return GrantResult{}, fmt.Errorf("adjustment of %d: %w", req.Credits, ErrInsufficientCredits)
	}
	return GrantResult{}, fmt.Errorf("grant to %q: unknown outcome %q", req.AccountID, outcome)
}

// Balance returns the account's committed figures, as every instance sees them.
func (s *Postgres) Balance(ctx context.Context, accountID string) (Balance, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return Balance{}, err
	}
	defer done()
	var b balanceRow
	err = s.pool.QueryRow(qctx, `SELECT `+pgList("", pgBalanceCols, false)+` FROM accounts WHERE id = $1`, accountID).Scan(b.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Balance{}, fmt.Errorf("account %q: %w", accountID, ErrNotFound)
	}
	if err != nil {
		return Balance{}, pgErr(ctx, "reading balance", err)
	}
	return b.balance(accountID), nil
}

// Purchases lists the account's purchase entries, newest first.
func (s *Postgres) Purchases(ctx context.Context, accountID string, limit int) ([]Entry, error) {
	limit, err := CheckListLimit(limit)
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
		return []Entry{}, s.mustExist(ctx, accountID)
	}
	return out, nil
}

// Purchase returns the account's purchase of reference: one row of the unique partial index
// entries_reference (account_id, reference), whatever the account's size. A missing account
// and a missing purchase are both ErrNotFound, so it does not ask which.
func (s *Postgres) Purchase(ctx context.Context, accountID, reference string) (Entry, error) {
	if err := CheckString("reference", reference, MaxReferenceLen, true); err != nil {
		return Entry{}, err
	}
	if err := pgStorable("reference", reference); err != nil {
		return Entry{}, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return Entry{}, err
	}
	defer done()
	// reference <> '' repeats the index's predicate: a prepared statement's generic plan cannot
	// prove it from reference = $2, and would not use the partial index without it.
	rows, err := s.pool.Query(qctx, `SELECT `+pgList("", pgEntryCols, false)+` FROM entries
		WHERE account_id = $1 AND reference = $2 AND reference <> '' AND kind = 'purchase'`, accountID, reference)
	if err != nil {
		return Entry{}, pgErr(ctx, "reading purchase", err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanEntry)
	if errors.Is(err, pgx.ErrNoRows) {
		return Entry{}, fmt.Errorf("purchase %q of account %q: %w", reference, accountID, ErrNotFound)
	}
	if err != nil {
		return Entry{}, pgErr(ctx, "reading purchase", err)
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
		return fmt.Errorf("account %q: %w", accountID, ErrNotFound)
	}
	return nil
}

// RefillTestCredits tops the account's available test credits up to upTo. The check and the
// grant are one call under the account's row lock, so concurrent refills, from any instance,
// never overshoot.
func (s *Postgres) RefillTestCredits(ctx context.Context, accountID string, upTo int64) (int64, Balance, error) {
	if err := CheckRefillTarget(upTo); err != nil {
		return 0, Balance{}, err
	}
	if err := s.life.Begin(); err != nil {
		return 0, Balance{}, err
	}
	defer s.life.End()
	var outcome string
	var credits int64
	var b balanceRow
	scan := func(r pgx.Row) error { return r.Scan(append([]any{&outcome, &credits}, b.dest()...)...) }
	if err := s.c.call(accountID, pgRefillSQL, scan, accountID, upTo, s.now().UTC().UnixNano()); err != nil {
		return 0, Balance{}, err
	}
	switch outcome {
	case "ok":
		return credits, b.balance(accountID), nil
	case "not_found":
		return 0, Balance{}, fmt.Errorf("account %q: %w", accountID, ErrNotFound)
	case "disabled":
		return 0, Balance{}, ErrAccountDisabled
	}
	return 0, Balance{}, fmt.Errorf("refill of %q: unknown outcome %q", accountID, outcome)
}
