package pgledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Accounts of the PostgreSQL engine. Email uniqueness is the database's (a unique constraint), so
// it holds across instances.

// CreateAccount creates an active account with zero balances.
func (s *Postgres) CreateAccount(ctx context.Context, email string) (ledger.Account, error) {
	e, err := ledger.NormalizeEmail(email)
	if err != nil {
		return ledger.Account{}, err
	}
	return s.createAccount(ctx, e, "")
}

// createAccount creates the account for the normalised email e and, if hash is set, its password
// credential in the same statement: there is never an account that a sign-up created without
// its password.
//
// A sign-up's account (one with a password) is unverified until its owner follows the link
// sent to the address.
func (s *Postgres) createAccount(ctx context.Context, e, hash string) (ledger.Account, error) {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.Account{}, err
	}
	defer done()
	for range 3 { // a new id that is taken (62^16 of them) is drawn again
		a := ledger.Account{ID: ledger.NewAccountID(), Email: e, Status: ledger.StatusActive, Created: s.now().UTC(), Unverified: hash != ""}
		sql := `INSERT INTO accounts (id, email, status, created, unverified) VALUES ($1, $2, $3, $4, $5)`
		args := []any{a.ID, a.Email, string(a.Status), a.Created.UnixNano(), a.Unverified}
		if hash != "" {
			sql = `WITH a AS (` + sql + ` RETURNING id)
				INSERT INTO credentials (account_id, hash, updated) SELECT id, $6, $4 FROM a`
			args = append(args, hash)
		}
		_, err := s.pool.Exec(wctx, sql, args...)
		switch pgUniqueConstraint(err) {
		case "accounts_email_key":
			return ledger.Account{}, fmt.Errorf("email %q: %w", e, ledger.ErrDuplicateEmail)
		case "accounts_pkey":
			continue
		}
		if err != nil {
			return ledger.Account{}, pgErr(ctx, "creating account", err)
		}
		return a, nil
	}
	return ledger.Account{}, fmt.Errorf("creating account: no free account id after 3 draws")
}

// GetAccount returns the account or ErrNotFound.
func (s *Postgres) GetAccount(ctx context.Context, id string) (ledger.Account, error) {
	return s.oneAccount(ctx, "id", id)
}

// GetAccountByEmail finds an account by its (normalised) email, or returns ErrNotFound.
func (s *Postgres) GetAccountByEmail(ctx context.Context, email string) (ledger.Account, error) {
	return s.oneAccount(ctx, "email", ledger.FoldEmail(email))
}

// oneAccount reads the account whose column col (id or email) is v.
func (s *Postgres) oneAccount(ctx context.Context, col, v string) (ledger.Account, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.Account{}, err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgAccountCols+` FROM accounts WHERE `+col+` = $1`, v)
	a, err := pgx.CollectExactlyOneRow(rows, scanAccount)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Account{}, fmt.Errorf("account with %s %q: %w", col, v, ledger.ErrNotFound)
	}
	return a, pgErr(ctx, "reading account", err)
}

// ListAccounts lists accounts in id order, one page at a time.
func (s *Postgres) ListAccounts(ctx context.Context, p ledger.Page) ([]ledger.Account, string, error) {
	limit, after, err := ledger.AccountPage(p)
	if err != nil {
		return nil, "", err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, "", err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgAccountCols+` FROM accounts WHERE email > $1 ORDER BY email LIMIT $2`, after, limit+1)
	out, err := pgx.CollectRows(rows, scanAccount)
	if err != nil {
		return nil, "", pgErr(ctx, "listing accounts", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = ledger.AccountCursor(out[len(out)-1].Email)
	}
	return out, next, nil
}

// SetAccountStatus enables or disables an account; every instance sees it on its next call.
// Holds already open can still be settled or voided.
func (s *Postgres) SetAccountStatus(ctx context.Context, id string, status ledger.AccountStatus) (ledger.Account, error) {
	if err := ledger.CheckAccountStatus(status); err != nil {
		return ledger.Account{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.Account{}, err
	}
	defer done()
	rows, _ := s.pool.Query(wctx, `UPDATE accounts SET status = $2 WHERE id = $1 RETURNING `+pgAccountCols, id, string(status))
	a, err := pgx.CollectExactlyOneRow(rows, scanAccount)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Account{}, fmt.Errorf("account %q: %w", id, ledger.ErrNotFound)
	}
	return a, pgErr(ctx, "setting account status", err)
}
