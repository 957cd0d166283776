package badgerledger

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Keys with limits on the Badger engine: UpdateKey, RollKey, and the key's count changed with
// the account's figures in the hold path (holds.go), under the account's lock and in
// the same commit as the hold, settle or void.

// holdKeyEntry returns the account's key keyID, or nil if it is not one of its keys (a hold
// may name no key, or one the caller made up). Called with a.mu held.
func (s *Badger) holdKeyEntry(a *account, keyID string) *keyEntry {
	if keyID == "" {
		return nil
	}
	return a.key(keyID)
}

// keyCharged is key e with a hold of n credits at t counted, or the budget the hold would exceed; counted is
// false for a key without a budget, which is not counted. It changes nothing: the hold stores
// the record (storeKeyLocked) once every other check has passed. Called with a.mu held.
func (s *Badger) keyCharged(e *keyEntry, t time.Time, n int64) (k ledger.Key, counted bool, over *ledger.KeyBudgetError) {
	k = *e.rec.Load()
	if !k.HasBudget() {
		return k, false, nil
	}
	u, b := k.Usage.Charge(k.KeyLimits, t, n)
	if b != "" {
		return ledger.Key{}, false, ledger.NewKeyBudgetError(k.KeyLimits, b, t)
	}
	k.Usage = u
	return k, true, nil
}

// releaseKey gives back to key e the n credits of a hold made at created (a void), and retakeKey
// takes it again (a settle after that void); both append the key's write to ws, or leave ws as
// it is for a key without a budget, which is not counted. Called with a.mu held.
func (s *Badger) releaseKey(ws []write, e *keyEntry, created time.Time, n int64) []write {
	k := *e.rec.Load()
	if !k.HasBudget() {
		return ws
	}
	k.Usage = k.Usage.Release(created, n)
	return append(ws, s.storeKeyLocked(e, k))
}

func (s *Badger) retakeKey(ws []write, e *keyEntry, created time.Time, n int64) []write {
	k := *e.rec.Load()
	if !k.HasBudget() {
		return ws
	}
	k.Usage = k.Usage.Retake(created, n)
	return append(ws, s.storeKeyLocked(e, k))
}

// openHoldsOf are the account's open holds of key keyID. Called with a.mu held: every open
// hold is in a.holds.
func openHoldsOf(a *account, keyID string) []ledger.OpenHold {
	var out []ledger.OpenHold
	for _, h := range a.holds {
		if h.rec.State == ledger.HoldOpen && h.rec.KeyID == keyID {
			out = append(out, ledger.OpenHold{Created: h.rec.Created, Credits: h.rec.Credits})
		}
	}
	return out
}

// storeKeyLocked makes k (its last use aside) the key's record in memory and returns its
// write. Called with the key's account's a.mu held.
func (s *Badger) storeKeyLocked(e *keyEntry, k ledger.Key) write {
	k.LastUsed = time.Time{}
	e.rec.Store(&k)
	u := e.used.Load()
	e.flushed = u
	return e.recordWrite(e.keyWith(u))
}

// key returns the account's key keyID, or nil. Called with a.mu held.
func (a *account) key(keyID string) *keyEntry {
	for _, k := range a.keys {
		if k.id == keyID {
			return k
		}
	}
	return nil
}

// findKeyLocked returns the account's key keyID. Called with a.mu held.
func findKeyLocked(a *account, keyID string) (*keyEntry, error) {
	if e := a.key(keyID); e != nil {
		return e, nil
	}
	return nil, fmt.Errorf("key %q of account %q: %w", keyID, a.id, ledger.ErrNotFound)
}

// UpdateKey replaces the key's name, expiry and limits; its usage is kept, except that a budget
// set on a key that had none counts from now (ledger.CountFrom).
func (s *Badger) UpdateKey(ctx context.Context, accountID, keyID string, set ledger.KeySettings) (ledger.Key, error) {
	if err := s.beginWrite(); err != nil {
		return ledger.Key{}, err
	}
	defer s.life.End()
	a, err := s.account(accountID)
	if err != nil {
		return ledger.Key{}, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	e, err := findKeyLocked(a, keyID)
	if err != nil {
		a.mu.Unlock()
		return ledger.Key{}, err
	}
	k := *e.rec.Load()
	if !k.Revoked.IsZero() {
		a.mu.Unlock()
		return ledger.Key{}, ledger.ErrAlreadyRevoked
	}
	set, err = ledger.CheckKeySettings(set, k.Expires, s.now())
	if err != nil {
		a.mu.Unlock()
		return ledger.Key{}, err
	}
	if ledger.BudgetStarts(k.KeyLimits, set.Limits) {
		// Under a.mu, so no hold of the key is made or resolved meanwhile.
		k.Usage = ledger.CountFrom(openHoldsOf(a, e.id), s.now())
	}
	k.Name, k.Expires, k.KeyLimits = set.Name, set.Expires, set.Limits
	op := s.c.enqueue([]write{s.storeKeyLocked(e, k)})
	out := e.key()
	a.mu.Unlock()
	if err := op.wait(); err != nil {
		return ledger.Key{}, err
	}
	return out, nil
}

// RollKey gives the key a new secret and keeps the previous one for grace. The new secret is
// found once the roll is durable; a previous secret that was still in its grace period stops
// at once, and so does the replaced one when grace is 0.
func (s *Badger) RollKey(ctx context.Context, accountID, keyID string, grace time.Duration) (string, ledger.Key, error) {
	if err := ledger.CheckRollGrace(grace); err != nil {
		return "", ledger.Key{}, err
	}
	if err := s.beginWrite(); err != nil {
		return "", ledger.Key{}, err
	}
	defer s.life.End()
	a, err := s.account(accountID)
	if err != nil {
		return "", ledger.Key{}, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	e, err := findKeyLocked(a, keyID)
	if err != nil {
		a.mu.Unlock()
		return "", ledger.Key{}, err
	}
	k := *e.rec.Load()
	if !k.Revoked.IsZero() {
		a.mu.Unlock()
		return "", ledger.Key{}, ledger.ErrAlreadyRevoked
	}
	t := s.now().UTC()
	full := ledger.NewFullKey(k.Mode)
	old := e.sec.Load()
	sec := &keySecrets{cur: sha256.Sum256([]byte(full))}
	drop := [][32]byte{}
	if old.hasPrev {
		drop = append(drop, old.prev)
	}
	k.Rolled, k.PreviousLast4, k.GraceUntil = t, "", time.Time{}
	if grace > 0 {
		sec.prev, sec.hasPrev, sec.prevUntil = old.cur, true, t.Add(grace)
		k.PreviousLast4, k.GraceUntil = k.Last4, sec.prevUntil
	} else {
		drop = append(drop, old.cur)
	}
	k.Last4 = full[len(full)-4:]
	e.sec.Store(sec)
	ws := []write{s.storeKeyLocked(e, k), set(keyHashKey(sec.cur), append([]byte(a.id), e.id...))}
	for _, d := range drop {
		ws = append(ws, del(keyHashKey(d)))
	}
	op := s.c.enqueue(ws)
	out := e.key()
	a.mu.Unlock()
	s.cacheMu.Lock()
	for _, d := range drop {
		delete(s.byDigest, d)
	}
	s.cacheMu.Unlock()
	if err := op.wait(); err != nil {
		return "", ledger.Key{}, err
	}
	// The new secret becomes usable only once it is durable.
	s.cacheMu.Lock()
	s.byDigest[sec.cur] = e // a is pinned: it is cached
	s.cacheMu.Unlock()
	return full, out, nil
}
