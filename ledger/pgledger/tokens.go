package pgledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Single-use tokens of the PostgreSQL engine: the digest is the key, consumption is a DELETE
// ... RETURNING, so of instances racing with one token exactly one gets its row. Creating a
// token deletes the expired ones.

// CreateToken makes a single-use token.
func (s *Postgres) CreateToken(ctx context.Context, accountID string, purpose ledger.TokenPurpose, ttl time.Duration) (string, error) {
	if err := ledger.CheckToken(purpose, ttl); err != nil {
		return "", err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return "", err
	}
	defer done()
	token := ledger.RandomBase62(ledger.SessionTokenLen)
	d := sha256.Sum256([]byte(token))
	t := s.now().UTC()
	tag, err := s.pool.Exec(wctx, `WITH gone AS (DELETE FROM account_tokens WHERE expires <= $5)
		INSERT INTO account_tokens (digest, account_id, purpose, expires)
		SELECT $1, id, $3, $4 FROM accounts WHERE id = $2`, d[:], accountID, string(purpose), t.Add(ttl).UnixNano(), t.UnixNano())
	if err != nil {
		return "", pgErr(ctx, "creating token", err)
	}
	if tag.RowsAffected() == 0 {
		return "", fmt.Errorf("account %q: %w", accountID, ledger.ErrNotFound)
	}
	return token, nil
}

// PeekToken returns the account of a live token.
func (s *Postgres) PeekToken(ctx context.Context, purpose ledger.TokenPurpose, token string) (ledger.Account, error) {
	return s.useToken(ctx, `SELECT account_id FROM account_tokens WHERE digest = $1 AND purpose = $2 AND expires > $3`, purpose, token)
}

// ConsumeToken uses a live token up.
func (s *Postgres) ConsumeToken(ctx context.Context, purpose ledger.TokenPurpose, token string) (ledger.Account, error) {
	return s.useToken(ctx, `DELETE FROM account_tokens WHERE digest = $1 AND purpose = $2 AND expires > $3 RETURNING account_id`, purpose, token)
}

func (s *Postgres) useToken(ctx context.Context, find string, purpose ledger.TokenPurpose, token string) (ledger.Account, error) {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.Account{}, err
	}
	defer done()
	if !ledger.LooksLikeToken(token) {
		return ledger.Account{}, ledger.ErrInvalidToken
	}
	d := sha256.Sum256([]byte(token))
	rows, _ := s.pool.Query(wctx, `WITH t AS (`+find+`) SELECT `+pgAccountColsA+` FROM accounts a JOIN t ON a.id = t.account_id`,
		d[:], string(purpose), s.now().UTC().UnixNano())
	a, err := pgx.CollectExactlyOneRow(rows, scanAccount)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Account{}, ledger.ErrInvalidToken
	}
	if err != nil {
		return ledger.Account{}, pgErr(ctx, "reading token", err)
	}
	return a, nil
}

// DeleteTokens deletes the account's tokens of purpose.
func (s *Postgres) DeleteTokens(ctx context.Context, accountID string, purpose ledger.TokenPurpose) error {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	_, err = s.pool.Exec(wctx, `DELETE FROM account_tokens WHERE account_id = $1 AND purpose = $2`, accountID, string(purpose))
	return pgErr(ctx, "deleting tokens", err)
}

// SetEmailVerified clears Unverified.
func (s *Postgres) SetEmailVerified(ctx context.Context, accountID string) (ledger.Account, error) {
	return s.updateAccount(ctx, "verifying email", `unverified = false`, accountID)
}

// SetLowBalanceAlert sets the low-balance threshold.
func (s *Postgres) SetLowBalanceAlert(ctx context.Context, accountID string, threshold int64) (ledger.Account, error) {
	if err := ledger.CheckThreshold(threshold); err != nil {
		return ledger.Account{}, err
	}
	return s.updateAccount(ctx, "setting the low balance alert", `low_balance_alert = $2, low_balance_notified = false`, accountID, threshold)
}

func (s *Postgres) updateAccount(ctx context.Context, what, set string, args ...any) (ledger.Account, error) {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.Account{}, err
	}
	defer done()
	rows, _ := s.pool.Query(wctx, `UPDATE accounts SET `+set+` WHERE id = $1 RETURNING `+pgAccountCols, args...)
	a, err := pgx.CollectExactlyOneRow(rows, scanAccount)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Account{}, fmt.Errorf("account %q: %w", args[0], ledger.ErrNotFound)
	}
	if err != nil {
		return ledger.Account{}, pgErr(ctx, what, err)
	}
	return a, nil
}

// NoteLowBalance sets LowBalanceNotified; the WHERE makes one caller of many see the change.
func (s *Postgres) NoteLowBalance(ctx context.Context, accountID string, below bool) (bool, error) {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	var changed, exists bool
	err = s.pool.QueryRow(wctx, `WITH u AS (UPDATE accounts SET low_balance_notified = $2
			WHERE id = $1 AND low_balance_notified <> $2 RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM u), EXISTS (SELECT 1 FROM accounts WHERE id = $1)`, accountID, below).Scan(&changed, &exists)
	if err != nil {
		return false, pgErr(ctx, "noting low balance", err)
	}
	if !exists {
		return false, fmt.Errorf("account %q: %w", accountID, ledger.ErrNotFound)
	}
	return changed, nil
}

// LowBalanceChanges is one query: the alert, the flag and the figures are columns of the
// account's row, available live credits balance - held. Its WHERE repeats the predicate of the
// partial index accounts_low_balance_alert (00006_low_balance_alerts.sql), which gives the
// accounts with an alert in id order: the query reads their rows, not every account's.
func (s *Postgres) LowBalanceChanges(ctx context.Context, limit int) ([]ledger.LowBalanceChange, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgAccountCols+`, balance - held FROM accounts
		WHERE low_balance_alert > 0 AND status = 'active'
			AND (balance - held < low_balance_alert) <> low_balance_notified
		ORDER BY id LIMIT $1`, limit)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.LowBalanceChange, error) {
		var r accountRow
		var avail int64
		err := row.Scan(append(r.dest(), &avail)...)
		return ledger.LowBalanceChange{Account: r.account(), Available: avail}, err
	})
	if err != nil {
		return nil, pgErr(ctx, "listing low-balance changes", err)
	}
	if out == nil {
		out = []ledger.LowBalanceChange{}
	}
	return out, nil
}
