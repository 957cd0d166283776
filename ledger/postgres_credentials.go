package ledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Passwords and browser sessions of the PostgreSQL engine. Passwords are argon2id hashes made
// and checked by password.go; sessions are stored under the SHA-256 digest of their token.
//
// SetPassword and CreateSession are ordered by the account's row: a session's insert takes the
// row's key-share lock (its foreign key) and SetPassword takes the row FOR UPDATE before it ends
// the account's sessions, so a session committed before the new password is ended with the
// others, on whichever instance it was made. Holds take the row FOR NO KEY UPDATE, which the
// key-share lock does not block.

// CreateAccountWithPassword creates an active account and its password credential in one
// statement.
func (s *Postgres) CreateAccountWithPassword(ctx context.Context, email, password string) (Account, error) {
	e, err := NormalizeEmail(email)
	if err != nil {
		return Account{}, err
	}
	if err := CheckPasswordPolicy(e, password); err != nil {
		return Account{}, err
	}
	// Refuse a known email before spending the hash; the unique constraint decides.
	if _, err := s.GetAccountByEmail(ctx, e); err == nil {
		return Account{}, fmt.Errorf("email %q: %w", e, ErrDuplicateEmail)
	} else if !errors.Is(err, ErrNotFound) {
		return Account{}, err
	}
	hash, err := HashPassword(password)
	if err != nil {
		return Account{}, err
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
	if err := CheckPasswordPolicy(a.Email, password); err != nil {
		return err
	}
	hash, err := HashPassword(password)
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
func (s *Postgres) Authenticate(ctx context.Context, email, password string) (Account, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return Account{}, err
	}
	defer done()
	fail := func(hash string) (Account, error) {
		_, _ = VerifyPassword(hash, password)
		return Account{}, ErrInvalidCredentials
	}
	if len(password) > MaxPasswordLen {
		return Account{}, ErrInvalidCredentials // no account has such a password; do not hash it
	}
	var a accountRow
	var hash *string
	err = s.pool.QueryRow(qctx, `SELECT `+pgAccountColsA+`, c.hash
		FROM accounts a LEFT JOIN credentials c ON c.account_id = a.id WHERE a.email = $1`, FoldEmail(email)).
		Scan(append(a.dest(), &hash)...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fail(DummyHash())
	case err != nil:
		return Account{}, pgErr(ctx, "reading credential", err)
	case hash == nil:
		return fail(DummyHash())
	}
	acct := a.account()
	match, err := VerifyPassword(*hash, password)
	if err != nil {
		return Account{}, fmt.Errorf("account %q: %w", acct.ID, err)
	}
	if !match {
		return Account{}, ErrInvalidCredentials
	}
	if acct.Status == StatusDisabled {
		return acct, ErrAccountDisabled
	}
	return acct, nil
}

// CreateSession starts a session for an active account.
func (s *Postgres) CreateSession(ctx context.Context, accountID string, ttl time.Duration) (string, Session, error) {
	if err := CheckSessionTTL(ttl); err != nil {
		return "", Session{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return "", Session{}, err
	}
	defer done()
	token := RandomBase62(SessionTokenLen)
	d := sha256.Sum256([]byte(token))
	t := s.now().UTC()
	sess := Session{ID: SessionID(d), AccountID: accountID, Created: t, Expires: t.Add(ttl), CSRFToken: RandomBase62(CsrfTokenLen)}
	var status *string
	err = s.pool.QueryRow(wctx, `WITH a AS (SELECT id, status FROM accounts WHERE id = $2),
		ins AS (INSERT INTO sessions (digest, account_id, created, expires, csrf_token)
			SELECT $1, id, $3, $4, $5 FROM a WHERE status = 'active' RETURNING 1)
		SELECT (SELECT status FROM a)`, d[:], accountID, t.UnixNano(), sess.Expires.UnixNano(), sess.CSRFToken).Scan(&status)
	switch {
	case err != nil:
		return "", Session{}, pgErr(ctx, "creating session", err)
	case status == nil:
		return "", Session{}, fmt.Errorf("account %q: %w", accountID, ErrNotFound)
	case *status != string(StatusActive):
		return "", Session{}, ErrAccountDisabled
	}
	return token, sess, nil
}

// GetSession finds a live session by its token, with its account.
func (s *Postgres) GetSession(ctx context.Context, token string) (Session, Account, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return Session{}, Account{}, err
	}
	defer done()
	if !LooksLikeToken(token) {
		return Session{}, Account{}, ErrInvalidSession
	}
	d := sha256.Sum256([]byte(token))
	var a accountRow
	var created, expires int64
	sess := Session{ID: SessionID(d)}
	err = s.pool.QueryRow(qctx, `SELECT s.created, s.expires, s.csrf_token, `+pgAccountColsA+`
		FROM sessions s JOIN accounts a ON a.id = s.account_id WHERE s.digest = $1`, d[:]).
		Scan(append([]any{&created, &expires, &sess.CSRFToken}, a.dest()...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, Account{}, ErrInvalidSession
	}
	if err != nil {
		return Session{}, Account{}, pgErr(ctx, "reading session", err)
	}
	sess.AccountID, sess.Created, sess.Expires = a.a.ID, pgTime(created), pgTime(expires)
	if !s.now().Before(sess.Expires) {
		return Session{}, Account{}, ErrInvalidSession
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
	if !LooksLikeToken(token) {
		return nil
	}
	d := sha256.Sum256([]byte(token))
	_, err = s.pool.Exec(wctx, `DELETE FROM sessions WHERE digest = $1`, d[:])
	return pgErr(ctx, "ending session", err)
}
