package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// CreateAccount creates an active account with zero balances. Emails are unique after
// normalisation (trimmed, lower-cased).
func (s *Badger) CreateAccount(ctx context.Context, email string) (ledger.Account, error) {
	e, err := ledger.NormalizeEmail(email)
	if err != nil {
		return ledger.Account{}, err
	}
	return s.createAccount(e, false, nil)
}

// createAccount creates the account for the normalised email e, writing extra (for example its
// credential) in the same durable commit. The account becomes visible only once durable.
// A sign-up's account is unverified until its owner follows the link sent to the address.
func (s *Badger) createAccount(e string, unverified bool, extra func(id string, t time.Time) []write) (ledger.Account, error) {
	if err := s.beginWrite(); err != nil {
		return ledger.Account{}, err
	}
	defer s.life.End()
	s.createMu.Lock()
	defer s.createMu.Unlock()

	// Every account created is durable, and so in the committer's snapshot, before createMu is
	// released: the snapshot decides.
	dup, err := s.accountIDByEmail(e)
	if err != nil {
		return ledger.Account{}, err
	}
	if dup != "" {
		return ledger.Account{}, fmt.Errorf("email %q: %w", e, ledger.ErrDuplicateEmail)
	}
	id := ""
	for id == "" {
		id = ledger.NewAccountID()
		if _, taken, err := s.snapGet(accountKey(id)); err != nil {
			return ledger.Account{}, err
		} else if taken {
			id = ""
		}
	}
	rec := ledger.Account{ID: id, Email: e, Status: ledger.StatusActive, Created: s.now().UTC(), Unverified: unverified}
	a := newAccount(rec)
	ws := []write{
		set(accountKey(id), mustJSON(rec)),
		set(emailKey(e), []byte(id)),
		a.balanceWrite(),
	}
	if extra != nil {
		ws = append(ws, extra(id, rec.Created)...)
	}
	// The account is read into the cache on first use, once durable.
	if err := s.c.enqueue(ws).wait(); err != nil {
		return ledger.Account{}, err
	}
	return rec, nil
}

// GetAccount returns the account or ErrNotFound.
func (s *Badger) GetAccount(ctx context.Context, id string) (ledger.Account, error) {
	if s.life.Closed.Load() {
		return ledger.Account{}, ledger.ErrClosed
	}
	a, err := s.account(id)
	if err != nil {
		return ledger.Account{}, err
	}
	defer s.unpin(a)
	return *a.rec.Load(), nil
}

// GetAccountByEmail finds an account by its (normalised) email, or returns ErrNotFound.
func (s *Badger) GetAccountByEmail(ctx context.Context, email string) (ledger.Account, error) {
	if s.life.Closed.Load() {
		return ledger.Account{}, ledger.ErrClosed
	}
	e := ledger.FoldEmail(email)
	id, err := s.accountIDByEmail(e)
	if err != nil {
		return ledger.Account{}, err
	}
	if id == "" {
		return ledger.Account{}, fmt.Errorf("account with email %q: %w", e, ledger.ErrNotFound)
	}
	return s.GetAccount(ctx, id)
}

// accountIDByEmail is the id of the account with the normalised email e, from the e-mail index
// in the committer's snapshot, or "".
func (s *Badger) accountIDByEmail(e string) (string, error) {
	v, ok, err := s.snapGet(emailKey(e))
	if err != nil || !ok {
		return "", err
	}
	return string(v), nil
}

// accountEmail is account id's e-mail address, or "" when it cannot be read.
func (s *Badger) accountEmail(id string) string {
	snap := s.c.acquire()
	defer s.c.release(snap)
	rec, _, _ := s.accountRecord(snap.txn, id)
	return rec.Email
}

// snapGet reads one value from the committer's snapshot; ok is false when the key does not
// exist.
func (s *Badger) snapGet(k []byte) ([]byte, bool, error) {
	snap := s.c.acquire()
	defer s.c.release(snap)
	return snap.get(k)
}

// accountRecord is account id's record: the cached one, or the one on disk, without reading
// the account into the cache (listings go over many accounts once).
func (s *Badger) accountRecord(txn *badger.Txn, id string) (ledger.Account, bool, error) {
	if a := s.pinCached(id); a != nil {
		defer s.unpin(a)
		return *a.rec.Load(), true, nil
	}
	v, ok, err := getValue(txn, accountKey(id))
	if err != nil || !ok {
		return ledger.Account{}, false, err
	}
	var rec ledger.Account
	if err := json.Unmarshal(v, &rec); err != nil {
		return ledger.Account{}, false, fmt.Errorf("account %q: %w", id, err)
	}
	return rec, true, nil
}

// ListAccounts lists accounts in e-mail order, one page at a time, walking the e-mail index
// from the cursor: a page reads its own accounts and no others.
func (s *Badger) ListAccounts(ctx context.Context, p ledger.Page) ([]ledger.Account, string, error) {
	if s.life.Closed.Load() {
		return nil, "", ledger.ErrClosed
	}
	limit, after, err := ledger.AccountPage(p)
	if err != nil {
		return nil, "", err
	}
	out := []ledger.Account{}
	more := false
	snap := s.c.acquire()
	defer s.c.release(snap)
	it := snap.txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixEmail}, PrefetchValues: true, PrefetchSize: min(limit+1, 100)})
	defer it.Close()
	for it.Seek(emailKey(after)); it.Valid(); it.Next() {
		item := it.Item()
		if string(item.Key()[1:]) <= after {
			continue
		}
		if len(out) == limit {
			more = true
			break
		}
		id, err := item.ValueCopy(nil)
		if err != nil {
			return nil, "", err
		}
		a, ok, err := s.accountRecord(snap.txn, string(id))
		if err != nil {
			return nil, "", err
		}
		if ok {
			out = append(out, a)
		}
	}
	next := ""
	if more {
		next = ledger.AccountCursor(out[len(out)-1].Email)
	}
	return out, next, nil
}

// SetAccountStatus enables or disables an account. Disabling takes effect on the next request;
// holds already open can still be settled or voided.
func (s *Badger) SetAccountStatus(ctx context.Context, id string, status ledger.AccountStatus) (ledger.Account, error) {
	if err := ledger.CheckAccountStatus(status); err != nil {
		return ledger.Account{}, err
	}
	if err := s.beginChange(); err != nil {
		return ledger.Account{}, err
	}
	defer s.life.End()
	a, err := s.account(id)
	if err != nil {
		return ledger.Account{}, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	rec := *a.rec.Load()
	if rec.Status == status {
		a.mu.Unlock()
		return rec, nil
	}
	rec.Status = status
	a.rec.Store(&rec)
	op := s.c.enqueue([]write{set(accountKey(id), mustJSON(rec))})
	a.mu.Unlock()
	if err := op.wait(); err != nil {
		return ledger.Account{}, err
	}
	return rec, nil
}
