package badgerledger

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// Credits of the Badger engine besides holds (holds.go): grants, purchases and
// adjustments, balances, the purchase list and test-credit refills.

// Grant adds credits (grant, purchase) or adds or removes them (adjustment). With a Reference
// it is idempotent: a reference already used on the account returns the first entry with
// Repeated set and credits nothing.
func (s *Badger) Grant(ctx context.Context, req ledger.GrantRequest) (ledger.GrantResult, error) {
	if err := ledger.CheckGrantRequest(req); err != nil {
		return ledger.GrantResult{}, err
	}
	if err := ledger.CheckLotGrant(req, s.now()); err != nil {
		return ledger.GrantResult{}, err
	}
	if err := s.beginWrite(); err != nil {
		return ledger.GrantResult{}, err
	}
	defer s.life.End()
	a, err := s.account(req.AccountID)
	if err != nil {
		return ledger.GrantResult{}, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	if req.Reference != "" {
		first, op, found, err := s.findGrant(a, req.Reference)
		if err != nil || found {
			b := a.liveBalance(s.now())
			a.mu.Unlock()
			if err != nil {
				return ledger.GrantResult{}, err
			}
			if err := s.c.waitFor(op); err != nil {
				return ledger.GrantResult{}, err
			}
			return ledger.GrantResult{Entry: first, Balance: b, Repeated: true}, nil
		}
	}
	t := s.now().UTC()
	var ws []write
	if req.Mode == ledger.Live && a.lotsDue(t) {
		ws = a.expireDue(ws, t)
	}
	// Only what takes credits away needs them available: a purchase or grant to an account in
	// debt (ledger/reversals.go) credits, however small against the debt.
	bal, held := a.figures(req.Mode)
	if req.Credits < 0 && bal+req.Credits-held < 0 {
		if len(ws) > 0 {
			s.c.enqueue(ws)
		}
		a.mu.Unlock()
		return ledger.GrantResult{}, fmt.Errorf("adjustment of %d with %d available: %w", req.Credits, bal-held, ledger.ErrInsufficientCredits)
	}
	ent, ews := a.appendEntry(ledger.Entry{Kind: req.Kind, Mode: req.Mode, Reference: req.Reference, Reason: req.Reason,
		AmountCents: req.AmountCents, Currency: req.Currency}, req.Credits, 0, t)
	ws = append(ws, ews...)
	if !req.Expires.IsZero() {
		s.someLots.Store(true) // before the lot's write: a load may read it from then on
		ws = a.addLot(ws, ledger.Lot{Seq: ent.Seq, Amount: req.Credits, Remaining: req.Credits, Expires: req.Expires.UTC()})
	}
	if req.Reference != "" {
		ws = append(ws, set(grantRefKey(a.id, req.Reference), seqBytes(ent.Seq)))
	}
	op := s.c.enqueue(ws)
	if req.Reference != "" {
		a.putRef(req.Reference, &refMem{entry: ent, op: op.id})
		a.recent = append(a.recent, recentItem{kind: 'r', key: req.Reference, op: op.id})
	}
	b := a.liveBalance(t)
	a.mu.Unlock()
	// A caller that stops waiting (an operator's command that timed out while the commit
	// waits for disk space) learns that the grant may still be made: ErrOutcomeUnknown.
	if err := op.waitCtx(ctx); err != nil {
		return ledger.GrantResult{}, err
	}
	return ledger.GrantResult{Entry: ent, Balance: b}, nil
}

// findGrant finds the entry that first used ref. Called with a.mu held.
func (s *Badger) findGrant(a *account, ref string) (ledger.Entry, uint64, bool, error) {
	snap := s.c.acquire()
	defer s.c.release(snap)
	a.prune(snap)
	if r := a.refs[ref]; r != nil {
		return r.entry, r.op, true, nil
	}
	var ent ledger.Entry
	v, ok, err := snap.get(grantRefKey(a.id, ref))
	if err != nil || !ok {
		return ent, 0, false, err
	}
	if len(v) != 8 {
		return ent, 0, false, fmt.Errorf("grant reference %q of %q: malformed", ref, a.id)
	}
	e, ok, err := snap.get(entryKey(a.id, binary.BigEndian.Uint64(v)))
	if err != nil {
		return ent, 0, false, err
	}
	if !ok {
		return ent, 0, false, fmt.Errorf("grant reference %q of %q points at a missing entry", ref, a.id)
	}
	return ent, 0, true, json.Unmarshal(e, &ent)
}

// Balance returns the account's live and test figures.
func (s *Badger) Balance(ctx context.Context, accountID string) (ledger.Balance, error) {
	if s.life.Closed.Load() {
		return ledger.Balance{}, ledger.ErrClosed
	}
	if err := s.c.err(); err != nil {
		return ledger.Balance{}, err
	}
	a, err := s.account(accountID)
	if err != nil {
		return ledger.Balance{}, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	defer a.mu.Unlock()
	return s.balanceNow(a)
}

// balanceNow is the account's balance after the credits that expired by now have left (a
// change, so it waits for it to be durable). Called with a.mu held.
func (s *Badger) balanceNow(a *account) (ledger.Balance, error) {
	t := s.now().UTC()
	if a.lotsDue(t) && s.beginChange() == nil {
		defer s.life.End()
		op := s.c.enqueue(a.expireDue(nil, t))
		b := a.liveBalance(t)
		a.mu.Unlock()
		err := op.wait()
		a.mu.Lock()
		return b, err
	}
	return a.liveBalance(t), nil
}

// Purchases lists the account's purchase entries, newest first. It reads the grant-reference
// index (every purchase has a reference), so it does not scan the account's request entries.
func (s *Badger) Purchases(ctx context.Context, accountID string, limit int) ([]ledger.Entry, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	if err := s.exists(accountID); err != nil {
		return nil, err
	}
	out := []ledger.Entry{}
	err = s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, key1(prefixGrantRef, accountID), func(k, v []byte) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if len(v) != 8 {
				return fmt.Errorf("grant reference %q: malformed", k)
			}
			ev, ok, err := getValue(txn, entryKey(accountID, binary.BigEndian.Uint64(v)))
			if err != nil || !ok {
				return err
			}
			var e ledger.Entry
			if err := json.Unmarshal(ev, &e); err != nil {
				return fmt.Errorf("entry of grant reference %q: %w", k, err)
			}
			if e.Kind == ledger.KindPurchase {
				out = append(out, e)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq > out[j].Seq })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Purchase returns the account's purchase of reference. The grant-reference index gives the
// Entry's number, so it reads two keys in one transaction, whatever the account's size. Like
// Purchases it reads what is durable: a purchase is found once its Grant has returned.
func (s *Badger) Purchase(ctx context.Context, accountID, reference string) (ledger.Entry, error) {
	if err := ledger.CheckString("reference", reference, ledger.MaxReferenceLen, true); err != nil {
		return ledger.Entry{}, err
	}
	if err := s.begin(); err != nil {
		return ledger.Entry{}, err
	}
	defer s.life.End()
	if err := ctx.Err(); err != nil {
		return ledger.Entry{}, err
	}
	if err := s.exists(accountID); err != nil {
		return ledger.Entry{}, err
	}
	notFound := fmt.Errorf("purchase %q of account %q: %w", reference, accountID, ledger.ErrNotFound)
	var e ledger.Entry
	err := s.db.View(func(txn *badger.Txn) error {
		v, ok, err := getValue(txn, grantRefKey(accountID, reference))
		if err != nil {
			return err
		}
		if !ok {
			return notFound
		}
		if len(v) != 8 {
			return fmt.Errorf("grant reference %q of %q: malformed", reference, accountID)
		}
		ev, ok, err := getValue(txn, entryKey(accountID, binary.BigEndian.Uint64(v)))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("grant reference %q of %q points at a missing entry", reference, accountID)
		}
		if err := json.Unmarshal(ev, &e); err != nil {
			return fmt.Errorf("entry of grant reference %q of %q: %w", reference, accountID, err)
		}
		if e.Kind != ledger.KindPurchase {
			return notFound
		}
		return nil
	})
	if err != nil {
		return ledger.Entry{}, err
	}
	return e, nil
}

// RefillTestCredits tops the account's available test credits up to upTo. The check and the
// grant happen under the account's mutex, so concurrent refills never overshoot.
func (s *Badger) RefillTestCredits(ctx context.Context, accountID string, upTo int64) (int64, ledger.Balance, error) {
	if err := ledger.CheckRefillTarget(upTo); err != nil {
		return 0, ledger.Balance{}, err
	}
	if err := s.beginWrite(); err != nil {
		return 0, ledger.Balance{}, err
	}
	defer s.life.End()
	a, err := s.account(accountID)
	if err != nil {
		return 0, ledger.Balance{}, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	if a.rec.Load().Status == ledger.StatusDisabled {
		a.mu.Unlock()
		return 0, ledger.Balance{}, ledger.ErrAccountDisabled
	}
	bal, held := a.figures(ledger.Test)
	credits := upTo - (bal - held)
	if credits <= 0 {
		b := a.balance()
		a.mu.Unlock()
		return 0, b, nil
	}
	// A refill is a grant without a reference: nothing can repeat it (the check above and the
	// grant are under one lock), so it needs no reference index.
	_, ws := a.appendEntry(ledger.Entry{Kind: ledger.KindGrant, Mode: ledger.Test, Reason: "test credit refill"}, credits, 0, s.now().UTC())
	op := s.c.enqueue(ws)
	b := a.balance()
	a.mu.Unlock()
	if err := op.wait(); err != nil {
		return 0, ledger.Balance{}, err
	}
	return credits, b, nil
}
