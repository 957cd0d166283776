package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/caddy-textgen/textgen/ledger"
)

// findIdem returns the live record for key, from memory while its write is not in the
// committer's snapshot, else from the snapshot. Called with a.mu held.
func (s *Badger) findIdem(a *account, key string) (*idemMem, error) {
	snap := s.c.acquire()
	defer s.c.release(snap)
	a.prune(snap)
	r := a.idem[key]
	if r == nil {
		v, ok, err := snap.get(idemKey(a.id, key))
		if err != nil {
			return nil, err
		}
		if ok {
			r = &idemMem{}
			if err := json.Unmarshal(v, &r.rec); err != nil {
				return nil, err
			}
		}
	}
	// Badger drops the record after its TTL; the check here makes the injected clock agree.
	if r != nil && ledger.IdemExpired(r.rec, s.now()) {
		return nil, nil
	}
	return r, nil
}

func (s *Badger) idemWrite(rec ledger.IdempotencyRecord) write {
	w := set(idemKey(rec.AccountID, rec.Key), mustJSON(rec))
	w.expiresAt = uint64(rec.Created.Add(ledger.IdempotencyTTL).Unix())
	return w
}

// BeginIdempotent stores rec if (AccountID, Key) is new and returns (rec, true); otherwise it
// returns the existing record and false. Created defaults to now.
func (s *Badger) BeginIdempotent(ctx context.Context, rec ledger.IdempotencyRecord) (ledger.IdempotencyRecord, bool, error) {
	if err := ledger.CheckIdempotencyRecord(rec); err != nil {
		return ledger.IdempotencyRecord{}, false, err
	}
	if err := s.beginWrite(); err != nil {
		return ledger.IdempotencyRecord{}, false, err
	}
	defer s.life.End()
	a, err := s.account(rec.AccountID)
	if err != nil {
		return ledger.IdempotencyRecord{}, false, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	old, err := s.findIdem(a, rec.Key)
	if err == nil && old != nil && (ledger.IdemReusable(old.rec, s.now(), s.opts.HoldTTL) || ledger.IdemOrphaned(old.rec, s.opened)) {
		old = nil // released, or abandoned by a crash: the new request takes the key over
	}
	if err != nil || old != nil {
		a.mu.Unlock()
		if err != nil {
			return ledger.IdempotencyRecord{}, false, err
		}
		if err := s.c.waitFor(old.op); err != nil {
			return ledger.IdempotencyRecord{}, false, err
		}
		return old.rec, false, nil
	}
	if rec.Created.IsZero() {
		rec.Created = s.now()
	}
	rec.Created = rec.Created.UTC()
	op := s.storeIdem(a, rec)
	a.mu.Unlock()
	if err := op.wait(); err != nil {
		return ledger.IdempotencyRecord{}, false, err
	}
	return rec, true, nil
}

// storeIdem queues rec's write. Called with a.mu held.
func (s *Badger) storeIdem(a *account, rec ledger.IdempotencyRecord) *pendingOp {
	op := s.c.enqueueNow([]write{s.idemWrite(rec)})
	a.putIdem(rec.Key, &idemMem{rec: rec, op: op.id})
	a.recent = append(a.recent, recentItem{kind: 'i', key: rec.Key, op: op.id})
	return op
}

// FinishIdempotent records the final HTTP status of the request that began key, or releases
// the key with StatusReleased.
func (s *Badger) FinishIdempotent(ctx context.Context, accountID, key string, status int) error {
	if err := ledger.CheckFinishStatus(status); err != nil {
		return err
	}
	if err := s.beginChange(); err != nil {
		return err
	}
	defer s.life.End()
	a, err := s.account(accountID)
	if err != nil {
		return err
	}
	defer s.unpin(a)
	a.mu.Lock()
	r, err := s.findIdem(a, key)
	if err != nil || r == nil {
		a.mu.Unlock()
		if err == nil {
			err = fmt.Errorf("idempotency key %q of account %q: %w", key, accountID, ledger.ErrNotFound)
		}
		return err
	}
	rec := r.rec
	rec.Status = status
	op := s.storeIdem(a, rec)
	a.mu.Unlock()
	return op.wait()
}
