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

// Single-use tokens of the Badger engine: the SHA-256 digest of the token is the key, so the
// token itself is never stored; Badger drops the record at its expiry. s.mailMu makes
// consumption one step.

// tokenRecord is the stored form of a token (prefixToken).
type tokenRecord struct {
	AccountID string              `json:"account_id"`
	Purpose   ledger.TokenPurpose `json:"purpose"`
	Expires   time.Time           `json:"expires"`
}

func tokenKey(d [32]byte) []byte { return append([]byte{prefixToken}, d[:]...) }

// CreateToken makes a single-use token.
func (s *Badger) CreateToken(ctx context.Context, accountID string, purpose ledger.TokenPurpose, ttl time.Duration) (string, error) {
	if err := ledger.CheckToken(purpose, ttl); err != nil {
		return "", err
	}
	if err := s.beginWrite(); err != nil {
		return "", err
	}
	defer s.life.End()
	if err := s.exists(accountID); err != nil {
		return "", err
	}
	token := ledger.RandomBase62(ledger.SessionTokenLen)
	d := sha256.Sum256([]byte(token))
	w := set(tokenKey(d), mustJSON(tokenRecord{AccountID: accountID, Purpose: purpose, Expires: s.now().UTC().Add(ttl)}))
	w.expiresAt = uint64(time.Now().Add(ttl).Unix()) + 1
	if err := s.c.enqueue([]write{w}).wait(); err != nil {
		return "", err
	}
	return token, nil
}

// PeekToken returns the account of a live token.
func (s *Badger) PeekToken(ctx context.Context, purpose ledger.TokenPurpose, token string) (ledger.Account, error) {
	return s.useToken(purpose, token, false)
}

// ConsumeToken uses a live token up.
func (s *Badger) ConsumeToken(ctx context.Context, purpose ledger.TokenPurpose, token string) (ledger.Account, error) {
	return s.useToken(purpose, token, true)
}

func (s *Badger) useToken(purpose ledger.TokenPurpose, token string, consume bool) (ledger.Account, error) {
	if !ledger.LooksLikeToken(token) {
		return ledger.Account{}, ledger.ErrInvalidToken
	}
	if err := s.begin(); err != nil {
		return ledger.Account{}, err
	}
	defer s.life.End()
	s.mailMu.Lock()
	defer s.mailMu.Unlock()
	d := sha256.Sum256([]byte(token))
	v, ok, err := s.get(tokenKey(d))
	if err != nil {
		return ledger.Account{}, err
	}
	if !ok {
		return ledger.Account{}, ledger.ErrInvalidToken
	}
	var r tokenRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return ledger.Account{}, fmt.Errorf("token record: %w", err)
	}
	if r.Purpose != purpose || !s.now().Before(r.Expires) {
		return ledger.Account{}, ledger.ErrInvalidToken
	}
	a, err := s.account(r.AccountID)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.Account{}, ledger.ErrInvalidToken
	}
	if err != nil {
		return ledger.Account{}, err
	}
	defer s.unpin(a)
	if consume {
		if err := s.c.enqueue([]write{del(tokenKey(d))}).wait(); err != nil {
			return ledger.Account{}, err
		}
	}
	return *a.rec.Load(), nil
}

// DeleteTokens deletes the account's tokens of purpose. Tokens are keyed by digest alone, so it
// reads them all; they live an hour to a few days, so there are few.
func (s *Badger) DeleteTokens(ctx context.Context, accountID string, purpose ledger.TokenPurpose) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.life.End()
	s.mailMu.Lock()
	defer s.mailMu.Unlock()
	var ws []write
	err := s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, []byte{prefixToken}, func(k, v []byte) error {
			var r tokenRecord
			if json.Unmarshal(v, &r) == nil && r.AccountID == accountID && r.Purpose == purpose {
				ws = append(ws, del(k))
			}
			return nil
		})
	})
	if err != nil || len(ws) == 0 {
		return err
	}
	return s.c.enqueue(ws).wait()
}

// SetEmailVerified clears Unverified.
func (s *Badger) SetEmailVerified(ctx context.Context, accountID string) (ledger.Account, error) {
	rec, _, err := s.updateAccount(accountID, func(a *ledger.Account) { a.Unverified = false })
	return rec, err
}

// SetLowBalanceAlert sets the low-balance threshold.
func (s *Badger) SetLowBalanceAlert(ctx context.Context, accountID string, threshold int64) (ledger.Account, error) {
	if err := ledger.CheckThreshold(threshold); err != nil {
		return ledger.Account{}, err
	}
	rec, _, err := s.updateAccount(accountID, func(a *ledger.Account) { a.LowBalanceAlert, a.LowBalanceNotified = threshold, false })
	return rec, err
}

// NoteLowBalance sets LowBalanceNotified.
func (s *Badger) NoteLowBalance(ctx context.Context, accountID string, below bool) (bool, error) {
	_, changed, err := s.updateAccount(accountID, func(a *ledger.Account) { a.LowBalanceNotified = below })
	return changed, err
}

// LowBalanceChanges reads the accounts that have an alert, in id order, from a small index in
// memory (low_balance_set.go). An account that is cached is read as memory has it (record and figures
// together, under its mutex; like Balance, it may see a change still in flight); one that is not
// has no open hold, and its records on disk are its figures. No account is read into the cache.
func (s *Badger) LowBalanceChanges(ctx context.Context, limit int) ([]ledger.LowBalanceChange, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	ids, err := s.alertedIDs(ctx)
	if err != nil {
		return nil, err
	}
	out := []ledger.LowBalanceChange{}
	snap := s.c.acquire()
	defer s.c.release(snap)
	for _, id := range ids {
		if len(out) == limit {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var c ledger.LowBalanceChange
		if a := s.pinCached(id); a != nil {
			a.mu.Lock()
			c = ledger.LowBalanceChange{Account: *a.rec.Load(), Available: a.bal - a.held}
			a.mu.Unlock()
			s.unpin(a)
		} else {
			rec, ok, err := s.accountRecord(snap.txn, id)
			if err != nil || !ok {
				return nil, err
			}
			bv, ok, err := snap.get(balanceKey(id))
			if err != nil || !ok {
				return nil, err
			}
			var b balanceRecord
			if err := json.Unmarshal(bv, &b); err != nil {
				return nil, fmt.Errorf("balance of %q: %w", id, err)
			}
			c = ledger.LowBalanceChange{Account: rec, Available: b.Balance}
		}
		if c.Account.Status == ledger.StatusActive && c.Account.LowBalanceAlert > 0 && c.Below() != c.Account.LowBalanceNotified {
			out = append(out, c)
		}
	}
	return out, nil
}

// updateAccount applies f to the account's record and writes it if f changed it.
func (s *Badger) updateAccount(id string, f func(*ledger.Account)) (ledger.Account, bool, error) {
	if err := s.beginChange(); err != nil {
		return ledger.Account{}, false, err
	}
	defer s.life.End()
	a, err := s.account(id)
	if err != nil {
		return ledger.Account{}, false, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	old := *a.rec.Load()
	rec := old
	f(&rec)
	if rec == old {
		a.mu.Unlock()
		return rec, false, nil
	}
	a.rec.Store(&rec)
	op := s.c.enqueue([]write{set(accountKey(id), mustJSON(rec))})
	a.mu.Unlock()
	if err := op.wait(); err != nil {
		return ledger.Account{}, false, err
	}
	if rec.LowBalanceAlert > 0 {
		s.noteAlert(id) // once durable: a first index's scan that missed it has ended
	}
	return rec, true, nil
}
