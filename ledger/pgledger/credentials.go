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

// Passwords and browser sessions of the PostgreSQL engine. Passwords are argon2id hashes made
// and checked by ledger/password.go; sessions are stored under the SHA-256 digest of their token.
//
// SetPassword and CreateSession are ordered by the account's row: a session's insert takes the
// row's key-share lock (its foreign key) and SetPassword takes the row FOR UPDATE before it ends
// the account's sessions, so a session committed before the new password is ended with the
// others, on whichever instance it was made. Holds take the row FOR NO KEY UPDATE, which the
// key-share lock does not block.

// CreateAccountWithPassword creates an active account and its password credential in one
// statement.
func (s *Postgres) CreateAccountWithPassword(ctx context.Context, email, password string) (ledger.Account, error) {
	e, err := ledger.NormalizeEmail(email)
	if err != nil {
		return ledger.Account{}, err
	}
	if err := ledger.CheckPasswordPolicy(e, password); err != nil {
		return ledger.Account{}, err
	}
	// Refuse a known email before spending the hash; the unique constraint decides.
	if _, err := s.GetAccountByEmail(ctx, e); err == nil {
		return ledger.Account{}, fmt.Errorf("email %q: %w", e, ledger.ErrDuplicateEmail)
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return ledger.Account{}, err
	}
	hash, err := ledger.HashPassword(password)
	if err != nil {
		return ledger.Account{}, err
	}
	return s.createAccount(ctx, e, hash)
}

// SetPassword replaces the account's password (or sets the first one) and ends every session of
// the account.
func (s *Postgres) SetPassword(ctx context.Context, accountID, password string) error {
	a, err := s.GetAccount(ctx, accountID)
	if err != nil {
		return err
	}
	if err := ledger.CheckPasswordPolicy(a.Email, password); err != nil {
		return err
	}
	hash, err := ledger.HashPassword(password)
	if err != nil {
		return err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	b := &pgx.Batch{} // one implicit transaction
	b.Queue(`SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE`, accountID)
	b.Queue(`INSERT INTO credentials (account_id, hash, updated) VALUES ($1, $2, $3)
		ON CONFLICT (account_id) DO UPDATE SET hash = excluded.hash, updated = excluded.updated`,
		accountID, hash, s.now().UTC().UnixNano())
	b.Queue(`DELETE FROM sessions WHERE account_id = $1`, accountID)
	return pgErr(ctx, "setting password", s.pool.SendBatch(wctx, b).Close())
}

// Authenticate checks an email and password. Every failure that could tell whether an email has
// an account (unknown email, no password, wrong password) is ErrInvalidCredentials and costs one
// argon2id hash, like a wrong password does.
func (s *Postgres) Authenticate(ctx context.Context, email, password string) (ledger.Account, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.Account{}, err
	}
	defer done()
	fail := func(hash string) (ledger.Account, error) {
		_, _ = ledger.VerifyPassword(hash, password)
		return ledger.Account{}, ledger.ErrInvalidCredentials
	}
	if len(password) > ledger.MaxPasswordLen {
		return ledger.Account{}, ledger.ErrInvalidCredentials // no account has such a password; do not hash it
	}
	var a accountRow
	var hash *string
	err = s.pool.QueryRow(qctx, `SELECT `+pgAccountColsA+`, c.hash
		FROM accounts a LEFT JOIN credentials c ON c.account_id = a.id WHERE a.email = $1`, ledger.FoldEmail(email)).
		Scan(append(a.dest(), &hash)...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fail(ledger.DummyHash())
	case err != nil:
		return ledger.Account{}, pgErr(ctx, "reading credential", err)
	case hash == nil:
		return fail(ledger.DummyHash())
	}
	acct := a.account()
	match, err := ledger.VerifyPassword(*hash, password)
	if err != nil {
		return ledger.Account{}, fmt.Errorf("account %q: %w", acct.ID, err)
	}
	if !match {
		return ledger.Account{}, ledger.ErrInvalidCredentials
	}
	if acct.Status == ledger.StatusDisabled {
		return acct, ledger.ErrAccountDisabled
	}
	return acct, nil
}

// CreateSession starts a session for an active account.
func (s *Postgres) CreateSession(ctx context.Context, accountID string, ttl time.Duration) (string, ledger.Session, error) {
	if err := ledger.CheckSessionTTL(ttl); err != nil {
		return "", ledger.Session{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return "", ledger.Session{}, err
	}
	defer done()
	token := ledger.RandomBase62(ledger.SessionTokenLen)
	d := sha256.Sum256([]byte(token))
	t := s.now().UTC()
	sess := ledger.Session{ID: ledger.SessionID(d), AccountID: accountID, Created: t, Expires: t.Add(ttl), CSRFToken: ledger.RandomBase62(ledger.CsrfTokenLen)}
	var status *string
	err = s.pool.QueryRow(wctx, `WITH a AS (SELECT id, status FROM accounts WHERE id = $2),
		ins AS (INSERT INTO sessions (digest, account_id, created, expires, csrf_token)
			SELECT $1, id, $3, $4, $5 FROM a WHERE status = 'active' RETURNING 1)
		SELECT (SELECT status FROM a)`, d[:], accountID, t.UnixNano(), sess.Expires.UnixNano(), sess.CSRFToken).Scan(&status)
	switch {
	case err != nil:
		return "", ledger.Session{}, pgErr(ctx, "creating session", err)
	case status == nil:
		return "", ledger.Session{}, fmt.Errorf("account %q: %w", accountID, ledger.ErrNotFound)
	case *status != string(ledger.StatusActive):
		return "", ledger.Session{}, ledger.ErrAccountDisabled
	}
	return token, sess, nil
}

// GetSession finds a live session by its token, with its account.
func (s *Postgres) GetSession(ctx context.Context, token string) (ledger.Session, ledger.Account, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.Session{}, ledger.Account{}, err
	}
	defer done()
	if !ledger.LooksLikeToken(token) {
		return ledger.Session{}, ledger.Account{}, ledger.ErrInvalidSession
	}
	d := sha256.Sum256([]byte(token))
	var a accountRow
	var created, expires int64
	sess := ledger.Session{ID: ledger.SessionID(d)}
	err = s.pool.QueryRow(qctx, `SELECT s.created, s.expires, s.csrf_token, `+pgAccountColsA+`
		FROM sessions s JOIN accounts a ON a.id = s.account_id WHERE s.digest = $1`, d[:]).
		Scan(append([]any{&created, &expires, &sess.CSRFToken}, a.dest()...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Session{}, ledger.Account{}, ledger.ErrInvalidSession
	}
	if err != nil {
		return ledger.Session{}, ledger.Account{}, pgErr(ctx, "reading session", err)
	}
	sess.AccountID, sess.Created, sess.Expires = a.a.ID, pgTime(created), pgTime(expires)
	if !s.now().Before(sess.Expires) {
		return ledger.Session{}, ledger.Account{}, ledger.ErrInvalidSession
	}
	return sess, a.account(), nil
}

// DeleteSession ends the session of token, if there is one.
func (s *Postgres) DeleteSession(ctx context.Context, token string) error {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	if !ledger.LooksLikeToken(token) {
		return nil
	}
	d := sha256.Sum256([]byte(token))
	_, err = s.pool.Exec(wctx, `DELETE FROM sessions WHERE digest = $1`, d[:])
	return pgErr(ctx, "ending session", err)
}
