package badgerledger

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

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

	s.acctMu.RLock()
	_, dup := s.byEmail[e]
	id := ""
	for id == "" || s.accounts[id] != nil {
		id = ledger.NewAccountID()
	}
	s.acctMu.RUnlock()
	if dup {
		return ledger.Account{}, fmt.Errorf("email %q: %w", e, ledger.ErrDuplicateEmail)
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
	if err := s.c.enqueue(ws).wait(); err != nil {
		return ledger.Account{}, err
	}
	s.acctMu.Lock()
	s.accounts[id] = a
	s.byEmail[e] = a
	i := sort.SearchStrings(s.acctIDs, id)
	s.acctIDs = append(s.acctIDs, "")
	copy(s.acctIDs[i+1:], s.acctIDs[i:])
	s.acctIDs[i] = id
	s.acctMu.Unlock()
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
	return *a.rec.Load(), nil
}

// GetAccountByEmail finds an account by its (normalised) email, or returns ErrNotFound.
func (s *Badger) GetAccountByEmail(ctx context.Context, email string) (ledger.Account, error) {
	if s.life.Closed.Load() {
		return ledger.Account{}, ledger.ErrClosed
	}
	e := ledger.FoldEmail(email)
	s.acctMu.RLock()
	a := s.byEmail[e]
	s.acctMu.RUnlock()
	if a == nil {
		return ledger.Account{}, fmt.Errorf("account with email %q: %w", e, ledger.ErrNotFound)
	}
	return *a.rec.Load(), nil
}

// ListAccounts lists accounts in e-mail order, one page at a time. The accounts are in memory;
// each page sorts them all (a few milliseconds for 100,000 accounts).
func (s *Badger) ListAccounts(ctx context.Context, p ledger.Page) ([]ledger.Account, string, error) {
	if s.life.Closed.Load() {
		return nil, "", ledger.ErrClosed
	}
	limit, after, err := ledger.AccountPage(p)
	if err != nil {
		return nil, "", err
	}
	s.acctMu.RLock()
	all := make([]ledger.Account, 0, len(s.acctIDs))
	for _, id := range s.acctIDs {
		if a := *s.accounts[id].rec.Load(); a.Email > after {
			all = append(all, a)
		}
	}
	s.acctMu.RUnlock()
	slices.SortFunc(all, func(a, b ledger.Account) int { return strings.Compare(a.Email, b.Email) })
	out := all[:min(limit, len(all))]
	next := ""
	if len(all) > limit {
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
