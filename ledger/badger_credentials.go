package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
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
func (s *Badger) CreateAccountWithPassword(ctx context.Context, email, password string) (Account, error) {
	e, err := NormalizeEmail(email)
	if err != nil {
		return Account{}, err
	}
	if err := CheckPasswordPolicy(e, password); err != nil {
		return Account{}, err
	}
	// Refuse a known email before spending the hash; the check under createMu below decides.
	s.acctMu.RLock()
	_, dup := s.byEmail[e]
	s.acctMu.RUnlock()
	if dup {
		return Account{}, fmt.Errorf("email %q: %w", e, ErrDuplicateEmail)
	}
	hash, err := HashPassword(password)
	if err != nil {
		return Account{}, err
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
	if err := CheckPasswordPolicy(a.rec.Load().Email, password); err != nil {
		return err
	}
	hash, err := HashPassword(password)
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
func (s *Badger) Authenticate(ctx context.Context, email, password string) (Account, error) {
	if s.life.Closed.Load() {
		return Account{}, ErrClosed
	}
	fail := func(hash string) (Account, error) {
		_, _ = VerifyPassword(hash, password)
		return Account{}, ErrInvalidCredentials
	}
	if len(password) > MaxPasswordLen {
		return Account{}, ErrInvalidCredentials // no account has such a password; do not hash it
	}
	e := FoldEmail(email)
	s.acctMu.RLock()
	a := s.byEmail[e]
	s.acctMu.RUnlock()
	if a == nil {
		return fail(DummyHash())
	}
	cred, ok, err := s.credential(a.id)
	if err != nil {
		return Account{}, err
	}
	if !ok {
		return fail(DummyHash())
	}
	match, err := VerifyPassword(cred.Hash, password)
	if err != nil {
		return Account{}, fmt.Errorf("account %q: %w", a.id, err)
	}
	if !match {
		return Account{}, ErrInvalidCredentials
	}
	acct := *a.rec.Load()
	if acct.Status == StatusDisabled {
		return acct, ErrAccountDisabled
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
func (s *Badger) CreateSession(ctx context.Context, accountID string, ttl time.Duration) (string, Session, error) {
	if err := CheckSessionTTL(ttl); err != nil {
		return "", Session{}, err
	}
	if err := s.beginWrite(); err != nil {
		return "", Session{}, err
	}
	defer s.life.End()
	a, err := s.account(accountID)
	if err != nil {
		return "", Session{}, err
	}
	if a.rec.Load().Status == StatusDisabled {
		return "", Session{}, ErrAccountDisabled
	}
	token := RandomBase62(SessionTokenLen)
	d := sha256.Sum256([]byte(token))
	t := s.now().UTC()
	rec := sessionRecord{AccountID: a.id, Created: t, Expires: t.Add(ttl), CSRFToken: RandomBase62(CsrfTokenLen)}
	// Badger drops both records at expiry; GetSession also compares with the clock.
	exp := uint64(time.Now().Add(ttl).Unix()) + 1
	w1 := set(sessionKey(d), mustJSON(rec))
	w2 := set(acctSessionKey(a.id, d), nil)
	w1.expiresAt, w2.expiresAt = exp, exp
	a.sessMu.Lock() // orders it with SetPassword, which ends the account's sessions
	op := s.c.enqueue([]write{w1, w2})
	a.sessMu.Unlock()
	if err := op.wait(); err != nil {
		return "", Session{}, err
	}
	return token, rec.session(d), nil
}

func (r sessionRecord) session(d [32]byte) Session {
	return Session{ID: SessionID(d), AccountID: r.AccountID, Created: r.Created, Expires: r.Expires, CSRFToken: r.CSRFToken}
}

// GetSession finds a live session by its token.
func (s *Badger) GetSession(ctx context.Context, token string) (Session, Account, error) {
	if !LooksLikeToken(token) {
		return Session{}, Account{}, ErrInvalidSession
	}
	if err := s.begin(); err != nil {
		return Session{}, Account{}, err
	}
	defer s.life.End()
	d := sha256.Sum256([]byte(token))
	v, ok, err := s.get(sessionKey(d))
	if err != nil {
		return Session{}, Account{}, err
	}
	if !ok {
		return Session{}, Account{}, ErrInvalidSession
	}
	var rec sessionRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return Session{}, Account{}, fmt.Errorf("session %s: %w", SessionID(d), err)
	}
	if !s.now().Before(rec.Expires) {
		return Session{}, Account{}, ErrInvalidSession
	}
	a, err := s.account(rec.AccountID)
	if errors.Is(err, ErrNotFound) {
		return Session{}, Account{}, ErrInvalidSession
	}
	if err != nil {
		return Session{}, Account{}, err
	}
	return rec.session(d), *a.rec.Load(), nil
}

// DeleteSession ends the session of token, if there is one.
func (s *Badger) DeleteSession(ctx context.Context, token string) error {
	if !LooksLikeToken(token) {
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
