package badgerledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// The account cache. An account's working state (its record, balances, open holds, lots,
// organisation and keys) is read from Badger the first time a call needs it and kept in memory
// while it is used. Once the cache holds more than Options.CacheAccounts accounts, it lets go of
// those not used lately (a second chance, as the CLOCK algorithm gives) down to nine in ten of
// that size, of those that may go. Badger is the source of truth: an account
// leaves the cache only when everything it changed is in the committer's snapshot, so that the
// next load reads exactly what memory held, and an account in use is never let go.
//
// "In use" is a pin: account() pins what it returns and the caller unpins it when its call
// ends (defer s.unpin(a)). Pins are taken under cacheMu's read lock and eviction holds its
// write lock, so an account with no pin cannot gain one while it is being let go. Besides, an
// account with an open hold (which must stay in memory until resolved, findHold), with key
// last-use times not yet written, or whose mutex is held is kept; an eviction pass writes the
// last-use times of the accounts it would let go, which may go in a later pass. A key lives with its account:
// byDigest finds the keys of the cached accounts, and a digest not there is looked up in the
// key-hash index on disk, which loads the key's account.

// DefaultCacheAccounts is the default of Options.CacheAccounts.
const DefaultCacheAccounts = 50_000

// loadShards spreads the loads of different accounts over mutexes of their own; one account
// is loaded by one caller at a time, so it is never in the cache twice.
const loadShards = 64

var loadSeed = maphash.MakeSeed()

// pinCached returns the cached account id, pinned, or nil.
func (s *Badger) pinCached(id string) *account {
	s.cacheMu.RLock()
	a := s.cached[id]
	if a != nil {
		a.pins.Add(1)
		if !a.used.Load() {
			a.used.Store(true)
		}
	}
	s.cacheMu.RUnlock()
	return a
}

// account returns the account, pinned (release it with unpin), loading it from Badger when it
// is not cached, or ErrNotFound.
func (s *Badger) account(id string) (*account, error) {
	if a := s.pinCached(id); a != nil {
		return a, nil
	}
	return s.loadAccount(id)
}

// loadAccount is account's way for an account that is not cached. It is a function of its own,
// never inlined, so that the frames of the calls on every request's path (a hold, a key's
// lookup) do not carry its locals: a stream waits on the stack of its connection goroutine, and
// frames a few hundred bytes larger took that stack past 16 KiB, doubling every open stream's.
//
//go:noinline
func (s *Badger) loadAccount(id string) (*account, error) {
	if len(id) != ledger.AccountIDLen {
		return nil, fmt.Errorf("account %q: %w", id, ledger.ErrNotFound)
	}
	mu := &s.loadMu[maphash.String(loadSeed, id)%loadShards]
	mu.Lock()
	defer mu.Unlock()
	if a := s.pinCached(id); a != nil {
		return a, nil
	}
	// The committer's snapshot holds every change of an account that left the cache (evict).
	snap := s.c.acquire()
	a, err := s.readAccount(snap.txn, id)
	s.c.release(snap)
	if err != nil {
		return nil, err
	}
	s.cacheMu.Lock()
	a.pins.Add(1)
	s.cached[id] = a
	for _, e := range a.keys {
		for _, d := range e.digests() {
			s.byDigest[d] = e
		}
	}
	n := len(s.cached)
	s.cacheMu.Unlock()
	if n := len(a.holds); n > 0 {
		s.openHolds.Add(int64(n)) // every hold loaded is open
	}
	s.loads.Add(1)
	if n > s.opts.CacheAccounts {
		s.evict()
	}
	return a, nil
}

// unpin releases a pin of account(). It notes the committer's last queued operation: every
// change the caller queued for the account is at or before it.
func (s *Badger) unpin(a *account) {
	noteSeen(a, s.c.queued.Load())
	a.pins.Add(-1)
}

// noteSeen raises a.seen to q.
func noteSeen(a *account, q uint64) {
	for {
		old := a.seen.Load()
		if old >= q || a.seen.CompareAndSwap(old, q) {
			return
		}
	}
}

// exists reports whether the account exists: nil or ErrNotFound.
func (s *Badger) exists(id string) error {
	a, err := s.account(id)
	if err != nil {
		return err
	}
	s.unpin(a)
	return nil
}

// evict lets go of accounts until the cache holds 9 in 10 of its size: those not used since the
// last pass first (a second chance, as the CLOCK algorithm gives), and only those that may go.
func (s *Badger) evict() {
	if !s.evicting.CompareAndSwap(false, true) {
		return
	}
	defer s.evicting.Store(false)
	target := s.opts.CacheAccounts - s.opts.CacheAccounts/10
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	snap := s.c.acquire()
	upTo := snap.upTo
	s.c.release(snap)
	for pass := 0; pass < 2 && len(s.cached) > target; pass++ {
		for id, a := range s.cached { // Go's map order is random: a sample, not a scan in order
			if len(s.cached) <= target {
				break
			}
			if a.used.Load() {
				a.used.Store(false)
				continue
			}
			if a.pins.Load() != 0 || a.seen.Load() > upTo || !a.mu.TryLock() {
				continue
			}
			if !a.holdsOpen() && a.lastUsedDirty() {
				// Its keys' last uses are written now, and it may go in a later pass once that
				// is in the snapshot (seen), rather than at the next flush.
				if op := s.c.enqueue(a.lastUsedWrites()); op.id != 0 {
					noteSeen(a, op.id)
				}
				a.mu.Unlock()
				continue
			}
			if a.evictable() {
				delete(s.cached, id)
				for _, e := range a.keys {
					for _, d := range e.digests() {
						if s.byDigest[d] == e {
							delete(s.byDigest, d)
						}
					}
				}
				s.evictions.Add(1)
			}
			a.mu.Unlock()
		}
	}
}

// evictable reports whether memory holds nothing of the account that its records on disk do
// not: no open hold, and every key's last use written. Called with a.mu held, the account
// unpinned and its changes in the committer's snapshot.
func (a *account) evictable() bool { return !a.holdsOpen() && !a.lastUsedDirty() }

// holdsOpen reports whether the account has an open hold. Called with a.mu held.
func (a *account) holdsOpen() bool {
	for _, h := range a.holds {
		if h.rec.State == ledger.HoldOpen {
			return true
		}
	}
	return false
}

// lastUsedDirty reports whether a key's last use is not yet written. Called with a.mu held.
func (a *account) lastUsedDirty() bool {
	for _, e := range a.keys {
		if e.used.Load() > e.flushed {
			return true
		}
	}
	return false
}

// cachedAccounts returns the cached accounts, pinned (unpin each).
func (s *Badger) cachedAccounts() []*account {
	s.cacheMu.RLock()
	defer s.cacheMu.RUnlock()
	out := make([]*account, 0, len(s.cached))
	for _, a := range s.cached {
		a.pins.Add(1)
		out = append(out, a)
	}
	return out
}

// readAccount reads account id's working state from txn: its record, balances, open holds,
// lots, organisation and keys.
func (s *Badger) readAccount(txn *badger.Txn, id string) (*account, error) {
	v, ok, err := getValue(txn, accountKey(id))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("account %q: %w", id, ledger.ErrNotFound)
	}
	var rec ledger.Account
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("account %q: %w", id, err)
	}
	a := newAccount(rec)
	v, ok, err = getValue(txn, balanceKey(id))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("account %q has no balance record", id)
	}
	var bal balanceRecord
	if err := json.Unmarshal(v, &bal); err != nil {
		return nil, fmt.Errorf("balance of %q: %w", id, err)
	}
	a.bal, a.testBal, a.nextSeq = bal.Balance, bal.TestBalance, bal.NextSeq
	// One iterator for the account's ranges, without prefetching: most are empty or short, and
	// making an iterator is most of what a read of them costs.
	it := txn.NewIterator(badger.IteratorOptions{})
	defer it.Close()
	each := func(prefix byte, f func(k, v []byte) error) error {
		p := key1(prefix, id)
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := f(item.KeyCopy(nil), v); err != nil {
				return err
			}
		}
		return nil
	}
	if s.diskHolds.Load() {
		// Until the previous process's holds are voided (Open), an account that is not cached
		// may have open holds on disk; after that, only a cached account makes one, and it stays
		// cached until the hold is resolved.
		err = each(prefixOpenHold, func(k, _ []byte) error {
			rid := string(k[1+ledger.AccountIDLen:])
			rec, err := getHold(txn, id, rid)
			if err != nil {
				return fmt.Errorf("open hold %q of %q: %w", rid, id, err)
			}
			if rec.State != ledger.HoldOpen {
				return fmt.Errorf("hold %q of %q is indexed as open but is %s", rid, id, rec.State)
			}
			a.putHold(rid, &holdMem{rec: rec})
			a.add(rec.Mode, 0, ledger.HeldCredits(rec.Credits))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if s.someLots.Load() {
		err = each(prefixLot, func(k, v []byte) error {
			var l ledger.Lot
			if err := json.Unmarshal(v, &l); err != nil {
				return fmt.Errorf("lot %q: %w", k, err)
			}
			a.lots = append(a.lots, l)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(a.lots) > 0 {
			ledger.SortLots(a.lots)
		}
	}
	if s.someOrgs.Load() {
		if err := s.readMembers(each, a); err != nil {
			return nil, err
		}
	}
	err = each(prefixKey, func(k, v []byte) error {
		var rec keyRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("key %q: %w", k[1:], err)
		}
		e, err := newKeyEntry(a, rec)
		if err != nil {
			return err
		}
		a.keys = append(a.keys, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// keyAccount is the account id the key-hash index gives for digest d, or "" when none does.
func (s *Badger) keyAccount(d [32]byte) (string, error) {
	snap := s.c.acquire()
	defer s.c.release(snap)
	v, ok, err := snap.get(keyHashKey(d))
	if err != nil || !ok || len(v) < ledger.AccountIDLen {
		return "", err
	}
	return string(v[:ledger.AccountIDLen]), nil
}

// keyByDigest returns the cached key entry of digest d, or nil.
func (s *Badger) keyByDigest(d [32]byte) *keyEntry {
	s.cacheMu.RLock()
	e := s.byDigest[d]
	s.cacheMu.RUnlock()
	return e
}

// forEachRecord calls f with every record under prefix in the committer's snapshot, in key
// order, one at a time: a scan in the memory of one record.
func (s *Badger) forEachRecord(prefix []byte, f func(k, v []byte) error) error {
	snap := s.c.acquire()
	defer s.c.release(snap)
	return iterate(snap.txn, prefix, f)
}

// hasField reports whether the JSON record v names field (a cheap filter before decoding).
func hasField(v []byte, field string) bool {
	return bytes.Contains(v, []byte(`"`+field+`"`))
}

// CacheStats is what the account cache holds and has done since Open.
type CacheStats struct {
	Accounts  int    // accounts cached now
	Keys      int    // key digests cached now
	Loads     uint64 // accounts read from Badger
	Evictions uint64 // accounts let go
}

// CacheStats reports the account cache's figures.
func (s *Badger) CacheStats() CacheStats {
	s.cacheMu.RLock()
	defer s.cacheMu.RUnlock()
	return CacheStats{Accounts: len(s.cached), Keys: len(s.byDigest), Loads: s.loads.Load(), Evictions: s.evictions.Load()}
}
