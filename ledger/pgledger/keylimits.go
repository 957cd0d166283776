package pgledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Keys with limits on the PostgreSQL engine: UpdateKey, RollKey, and the refusal of a hold by
// its key's budget. The count itself is kept by ledger_hold and ledger_holds (migration 00009)
// in the hold's transaction, under the lock of the key's account.

// keyBudgetOutcome turns a hold's key_budget_* outcome at t into its error; limit is the
// budget, which the row reports in o_available. ok is false for any other outcome.
func keyBudgetOutcome(o holdOutcome, t time.Time) (*ledger.KeyBudgetError, bool) {
	b, ok := strings.CutPrefix(o.outcome, "key_budget_")
	if !ok {
		return nil, false
	}
	var l ledger.KeyLimits
	switch b {
	case ledger.BudgetDay:
		l.BudgetDay = o.available
	case ledger.BudgetMonth:
		l.BudgetMonth = o.available
	default:
		b, l.BudgetTotal = ledger.BudgetTotal, o.available
	}
	return ledger.NewKeyBudgetError(l, b, t), true
}

// UpdateKey replaces the key's name, expiry and limits; its usage is kept, except that a budget
// set on a key that had none counts from now (ledger.CountFrom, ledger_key_count_from). Every
// instance's next hold and lookup read them from the row.
func (s *Postgres) UpdateKey(ctx context.Context, accountID, keyID string, set ledger.KeySettings) (ledger.Key, error) {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.Key{}, err
	}
	defer done()
	cur, err := s.keyOf(wctx, ctx, accountID, keyID)
	if err != nil {
		return ledger.Key{}, err
	}
	set, err = ledger.CheckKeySettings(set, cur.Expires, s.now())
	if err != nil {
		return ledger.Key{}, err
	}
	l := set.Limits
	if err := pgStorable("key settings", append([]string{set.Name, l.Note}, append(l.AllowedTools, l.AllowedCIDRs...)...)...); err != nil {
		return ledger.Key{}, err
	}
	var r keyRow
	if l.HasBudget() {
		// Perhaps a budget set on a key that had none (by the key as it is under the lock, not
		// as read above): its count starts now, from the key's open holds.
		err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error { return s.updateKeyCounting(wctx, tx, accountID, keyID, set, &r) })
	} else {
		err = s.updateKeyRow(wctx, s.pool, accountID, keyID, set, &r)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Key{}, ledger.ErrAlreadyRevoked // it was there a moment ago: revoked since
	}
	if err != nil {
		return ledger.Key{}, pgErr(ctx, "updating key", err)
	}
	return s.used.merge(r.key()), nil
}

// pgQueryer is a pool or a transaction.
type pgQueryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// updateKeyRow writes the key's settings and reads the key back into r; pgx.ErrNoRows if it is
// revoked or gone.
func (s *Postgres) updateKeyRow(ctx context.Context, q pgQueryer, accountID, keyID string, set ledger.KeySettings, r *keyRow) error {
	l := set.Limits
	return q.QueryRow(ctx, `WITH k AS (UPDATE api_keys SET name = $3, expires = $4, note = $5, budget_total = $6,
			budget_day = $7, budget_month = $8, allowed_tools = $9, allowed_cidrs = $10
		WHERE account_id = $1 AND id = $2 AND revoked IS NULL RETURNING *)
		SELECT `+pgKeyCols+` FROM k LEFT JOIN api_key_usage u ON u.key_id = k.id`,
		accountID, keyID, set.Name, pgNanos(set.Expires), l.Note, l.BudgetTotal, l.BudgetDay, l.BudgetMonth,
		pgTextArray(l.AllowedTools), pgTextArray(l.AllowedCIDRs)).Scan(r.dest()...)
}

// updateKeyCounting is updateKeyRow of settings that may set a budget on a key that had none,
// in tx: under the lock of the account, which every hold takes first (so no hold of the key is
// made or resolved meanwhile), it reads the key's budgets as they are now and, if the key has
// none, starts its count from its open holds (ledger_key_count_from) before the settings are
// written.
func (s *Postgres) updateKeyCounting(ctx context.Context, tx pgx.Tx, accountID, keyID string, set ledger.KeySettings, r *keyRow) error {
	if _, err := tx.Exec(ctx, `SELECT ledger_lock($1)`, accountID); err != nil {
		return err
	}
	var old ledger.KeyLimits
	err := tx.QueryRow(ctx, `SELECT budget_total, budget_day, budget_month FROM api_keys
		WHERE account_id = $1 AND id = $2 AND revoked IS NULL FOR UPDATE`, accountID, keyID).
		Scan(&old.BudgetTotal, &old.BudgetDay, &old.BudgetMonth)
	if err != nil {
		return err
	}
	if ledger.BudgetStarts(old, set.Limits) {
		if _, err := tx.Exec(ctx, `SELECT ledger_key_count_from($1, $2, $3)`, accountID, keyID, s.now().UTC().UnixNano()); err != nil {
			return err
		}
	}
	return s.updateKeyRow(ctx, tx, accountID, keyID, set, r)
}

// RollKey gives the key a new secret and keeps the previous one until grace has passed; a
// previous secret still in its grace period is dropped at once. One conditional UPDATE, so two
// rolls at once on two instances are ordered by the row's lock.
func (s *Postgres) RollKey(ctx context.Context, accountID, keyID string, grace time.Duration) (string, ledger.Key, error) {
	if err := ledger.CheckRollGrace(grace); err != nil {
		return "", ledger.Key{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return "", ledger.Key{}, err
	}
	defer done()
	cur, err := s.keyOf(wctx, ctx, accountID, keyID)
	if err != nil {
		return "", ledger.Key{}, err
	}
	full := ledger.NewFullKey(cur.Mode)
	d := sha256.Sum256([]byte(full))
	t := s.now().UTC()
	var until any
	if grace > 0 {
		until = t.Add(grace).UnixNano()
	}
	var r keyRow
	// With a grace period the replaced digest becomes the previous one; without, it is dropped.
	err = s.pool.QueryRow(wctx, `WITH k AS (UPDATE api_keys SET
			prev_digest = CASE WHEN $5::bigint IS NULL THEN NULL ELSE digest END,
			prev_last4 = CASE WHEN $5::bigint IS NULL THEN '' ELSE last4 END,
			prev_until = $5, digest = $3, last4 = $4, rolled = $6
		WHERE account_id = $1 AND id = $2 AND revoked IS NULL RETURNING *)
		SELECT `+pgKeyCols+` FROM k LEFT JOIN api_key_usage u ON u.key_id = k.id`,
		accountID, keyID, d[:], full[len(full)-4:], until, t.UnixNano()).Scan(r.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ledger.Key{}, ledger.ErrAlreadyRevoked
	}
	if err != nil {
		return "", ledger.Key{}, pgErr(ctx, "rolling key", err)
	}
	return full, s.used.merge(r.key()), nil
}

// keyOf returns the account's key keyID, refusing a revoked one with ErrAlreadyRevoked.
func (s *Postgres) keyOf(qctx, ctx context.Context, accountID, keyID string) (ledger.Key, error) {
	var r keyRow
	err := s.pool.QueryRow(qctx, `SELECT `+pgKeyCols+pgKeyFrom+` WHERE k.account_id = $1 AND k.id = $2`, accountID, keyID).Scan(r.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Key{}, fmt.Errorf("key %q of account %q: %w", keyID, accountID, ledger.ErrNotFound)
	}
	if err != nil {
		return ledger.Key{}, pgErr(ctx, "reading key", err)
	}
	k := r.key()
	if !k.Revoked.IsZero() {
		return ledger.Key{}, ledger.ErrAlreadyRevoked
	}
	return k, nil
}

// pgTextArray is s as a text[] value that is never NULL.
func pgTextArray(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
