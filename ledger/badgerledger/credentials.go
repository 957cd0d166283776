package badgerledger

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// What the self-service account area stores besides accounts, keys and credits: password
// credentials and browser sessions. Both live only in Badger (not in the in-memory working
// state): they are read once per page view or log-in, where a Badger read costs nothing that
// matters.

// credentialRecord is the stored form of a password (prefixCredential).
type credentialRecord struct {
	Hash    string    `json:"hash"` // PHC argon2id string
	Updated time.Time `json:"updated"`
}

// sessionRecord is the stored form of a session (prefixSession); the token is not in it.
type sessionRecord struct {
	AccountID string    `json:"account_id"`
	Created   time.Time `json:"created"`
	Expires   time.Time `json:"expires"`
	CSRFToken string    `json:"csrf_token"`
}

// CreateAccountWithPassword creates an active account with zero balances and its password
// credential in one durable write: there is never an account that a sign-up created without
// its password.
func (s *Badger) CreateAccountWithPassword(ctx context.Context, email, password string) (ledger.Account, error) {
	e, err := ledger.NormalizeEmail(email)
	if err != nil {
		return ledger.Account{}, err
	}
	if err := ledger.CheckPasswordPolicy(e, password); err != nil {
		return ledger.Account{}, err
	}
	// Refuse a known email before spending the hash; the check under createMu below decides.
	if dup, err := s.accountIDByEmail(e); err != nil {
		return ledger.Account{}, err
	} else if dup != "" {
		return ledger.Account{}, fmt.Errorf("email %q: %w", e, ledger.ErrDuplicateEmail)
	}
	hash, err := ledger.HashPassword(password)
	if err != nil {
		return ledger.Account{}, err
	}
	return s.createAccount(e, true, func(id string, t time.Time) []write {
		return []write{set(credentialKey(id), mustJSON(credentialRecord{Hash: hash, Updated: t}))}
	})
}

// SetPassword replaces the account's password (or sets the first one of an account the operator
// created) and ends every session of the account.
func (s *Badger) SetPassword(ctx context.Context, accountID, password string) error {
	a, err := s.account(accountID)
	if err != nil {
		return err
	}
	defer s.unpin(a)
	if err := ledger.CheckPasswordPolicy(a.rec.Load().Email, password); err != nil {
		return err
	}
	hash, err := ledger.HashPassword(password)
	if err != nil {
		return err
	}
	if err := s.beginWrite(); err != nil {
		return err
	}
	defer s.life.End()
	ws := []write{set(credentialKey(a.id), mustJSON(credentialRecord{Hash: hash, Updated: s.now().UTC()}))}
	a.sessMu.Lock()
	// CreateSession queues under a.sessMu, so after this barrier every session of the account
	// is durable and visible to the read below.
	if err := s.c.barrier(); err != nil {
		a.sessMu.Unlock()
		return err
	}
	sessions, err := s.accountSessions(a.id)
	if err != nil {
		a.sessMu.Unlock()
		return err
	}
	for _, d := range sessions {
		ws = append(ws, del(sessionKey(d)), del(acctSessionKey(a.id, d)))
	}
	op := s.c.enqueue(ws)
	a.sessMu.Unlock()
	return op.wait()
}

// accountSessions lists the digests of the account's stored sessions.
func (s *Badger) accountSessions(acct string) ([][32]byte, error) {
	var out [][32]byte
	err := s.db.View(func(txn *badger.Txn) error {
		prefix := key1(prefixAcctSession, acct)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != len(prefix)+32 {
				return fmt.Errorf("malformed session index key %x", k)
			}
			var d [32]byte
			copy(d[:], k[len(prefix):])
			out = append(out, d)
		}
		return nil
	})
	return out, err
}

// Authenticate checks an email and password. Every failure that could tell whether an email
// has an account (unknown email, no password, wrong password) is ErrInvalidCredentials and
// costs one argon2id hash, like a wrong password does.
func (s *Badger) Authenticate(ctx context.Context, email, password string) (ledger.Account, error) {
	if s.life.Closed.Load() {
		return ledger.Account{}, ledger.ErrClosed
	}
	fail := func(hash string) (ledger.Account, error) {
		_, _ = ledger.VerifyPassword(hash, password)
		return ledger.Account{}, ledger.ErrInvalidCredentials
	}
	if len(password) > ledger.MaxPasswordLen {
		return ledger.Account{}, ledger.ErrInvalidCredentials // no account has such a password; do not hash it
	}
	e := ledger.FoldEmail(email)
	id, err := s.accountIDByEmail(e)
	if err != nil {
		return ledger.Account{}, err
	}
	if id == "" {
		return fail(ledger.DummyHash())
	}
	a, err := s.account(id)
	if err != nil {
		return ledger.Account{}, err
	}
	defer s.unpin(a)
	defer s.unpin(a)
	cred, ok, err := s.credential(a.id)
	if err != nil {
		return ledger.Account{}, err
	}
	if !ok {
		return fail(ledger.DummyHash())
	}
	match, err := ledger.VerifyPassword(cred.Hash, password)
	if err != nil {
		return ledger.Account{}, fmt.Errorf("account %q: %w", a.id, err)
	}
	if !match {
		return ledger.Account{}, ledger.ErrInvalidCredentials
	}
	acct := *a.rec.Load()
	if acct.Status == ledger.StatusDisabled {
		return acct, ledger.ErrAccountDisabled
	}
	return acct, nil
}

func (s *Badger) credential(acct string) (credentialRecord, bool, error) {
	var rec credentialRecord
	if err := s.begin(); err != nil {
		return rec, false, err
	}
	defer s.life.End()
	v, ok, err := s.get(credentialKey(acct))
	if err != nil || !ok {
		return rec, false, err
	}
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, false, fmt.Errorf("credential of %q: %w", acct, err)
	}
	return rec, true, nil
}

// CreateSession starts a session for an active account.
func (s *Badger) CreateSession(ctx context.Context, accountID string, ttl time.Duration) (string, ledger.Session, error) {
	if err := ledger.CheckSessionTTL(ttl); err != nil {
		return "", ledger.Session{}, err
	}
	if err := s.beginWrite(); err != nil {
		return "", ledger.Session{}, err
	}
	defer s.life.End()
	a, err := s.account(accountID)
	if err != nil {
		return "", ledger.Session{}, err
	}
	defer s.unpin(a)
	if a.rec.Load().Status == ledger.StatusDisabled {
		return "", ledger.Session{}, ledger.ErrAccountDisabled
	}
	token := ledger.RandomBase62(ledger.SessionTokenLen)
	d := sha256.Sum256([]byte(token))
	t := s.now().UTC()
	rec := sessionRecord{AccountID: a.id, Created: t, Expires: t.Add(ttl), CSRFToken: ledger.RandomBase62(ledger.CsrfTokenLen)}
	// Badger drops both records at expiry; GetSession also compares with the clock.
	exp := uint64(time.Now().Add(ttl).Unix()) + 1
	w1 := set(sessionKey(d), mustJSON(rec))
	w2 := set(acctSessionKey(a.id, d), nil)
	w1.expiresAt, w2.expiresAt = exp, exp
	a.sessMu.Lock() // orders it with SetPassword, which ends the account's sessions
	op := s.c.enqueue([]write{w1, w2})
	a.sessMu.Unlock()
	if err := op.wait(); err != nil {
		return "", ledger.Session{}, err
	}
	return token, rec.session(d), nil
}

func (r sessionRecord) session(d [32]byte) ledger.Session {
	return ledger.Session{ID: ledger.SessionID(d), AccountID: r.AccountID, Created: r.Created, Expires: r.Expires, CSRFToken: r.CSRFToken}
}

// GetSession finds a live session by its token.
func (s *Badger) GetSession(ctx context.Context, token string) (ledger.Session, ledger.Account, error) {
	if !ledger.LooksLikeToken(token) {
		return ledger.Session{}, ledger.Account{}, ledger.ErrInvalidSession
	}
	if err := s.begin(); err != nil {
		return ledger.Session{}, ledger.Account{}, err
	}
	defer s.life.End()
	d := sha256.Sum256([]byte(token))
	v, ok, err := s.get(sessionKey(d))
	if err != nil {
		return ledger.Session{}, ledger.Account{}, err
	}
	if !ok {
		return ledger.Session{}, ledger.Account{}, ledger.ErrInvalidSession
	}
	var rec sessionRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return ledger.Session{}, ledger.Account{}, fmt.Errorf("session %s: %w", ledger.SessionID(d), err)
	}
	if !s.now().Before(rec.Expires) {
		return ledger.Session{}, ledger.Account{}, ledger.ErrInvalidSession
	}
	a, err := s.account(rec.AccountID)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.Session{}, ledger.Account{}, ledger.ErrInvalidSession
	}
	if err != nil {
		return ledger.Session{}, ledger.Account{}, err
	}
	defer s.unpin(a)
	return rec.session(d), *a.rec.Load(), nil
}

// DeleteSession ends the session of token, if there is one.
func (s *Badger) DeleteSession(ctx context.Context, token string) error {
	if !ledger.LooksLikeToken(token) {
		return nil
	}
	if err := s.beginChange(); err != nil {
		return err
	}
	defer s.life.End()
	d := sha256.Sum256([]byte(token))
	v, ok, err := s.get(sessionKey(d))
	if err != nil || !ok {
		return err
	}
	var rec sessionRecord
	ws := []write{del(sessionKey(d))}
	if json.Unmarshal(v, &rec) == nil && rec.AccountID != "" {
		ws = append(ws, del(acctSessionKey(rec.AccountID, d)))
	}
	return s.c.enqueue(ws).wait()
}
