package badgerledger

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// keyRecord is the stored form of a key (prefixKey): the public Key plus its digest.
type keyRecord struct {
	ledger.Key
	Digest string `json:"digest"` // hex SHA-256 of the full key
	// PrevDigest is the hex SHA-256 of the secret a roll replaced, valid until Key.GraceUntil.
	PrevDigest string `json:"prev_digest,omitempty"`
}

// keySecrets are the digests a key is found by: its secret and, after a roll with a grace
// period, the previous one until prevUntil. Replaced (never mutated) by RollKey.
type keySecrets struct {
	cur, prev [32]byte
	hasPrev   bool
	prevUntil time.Time
}

// keyEntry is a key in memory. rec is replaced (never mutated) on revocation; LastUsed lives in
// lastUsed so that LookupKey needs no lock and no disk write.
type keyEntry struct {
	id      string
	acct    *account
	sec     atomic.Pointer[keySecrets]
	rec     atomic.Pointer[ledger.Key]
	used    atomic.Int64 // unix nanoseconds of the last use; 0 = never
	flushed int64        // value of used last written to disk; guarded by acct.mu
}

func newKeyEntry(a *account, rec keyRecord) (*keyEntry, error) {
	e := &keyEntry{id: rec.ID, acct: a}
	var sec keySecrets
	d, err := hex.DecodeString(rec.Digest)
	if err != nil || len(d) != len(sec.cur) {
		return nil, fmt.Errorf("key %q: malformed digest", rec.ID)
	}
	sec.cur = [32]byte(d)
	if rec.PrevDigest != "" {
		d, err := hex.DecodeString(rec.PrevDigest)
		if err != nil || len(d) != len(sec.prev) {
			return nil, fmt.Errorf("key %q: malformed previous digest", rec.ID)
		}
		sec.prev, sec.hasPrev, sec.prevUntil = [32]byte(d), true, rec.GraceUntil
	}
	e.sec.Store(&sec)
	k := rec.Key
	compactKey(&k, a)
	if !k.LastUsed.IsZero() {
		e.used.Store(k.LastUsed.UnixNano())
		e.flushed = e.used.Load()
	}
	k.LastUsed = time.Time{}
	e.rec.Store(&k)
	return e, nil
}

// key returns the public key with its current last-use time.
func (e *keyEntry) key() ledger.Key { return e.keyWith(e.used.Load()) }

// keyWith returns the public key with last use u (unix nanoseconds, 0 = never).
func (e *keyEntry) keyWith(u int64) ledger.Key {
	k := *e.rec.Load()
	if u != 0 {
		k.LastUsed = time.Unix(0, u).UTC()
	}
	return k
}

func (e *keyEntry) recordWrite(k ledger.Key) write {
	sec := e.sec.Load()
	rec := keyRecord{Key: k, Digest: hex.EncodeToString(sec.cur[:])}
	if sec.hasPrev {
		rec.PrevDigest = hex.EncodeToString(sec.prev[:])
	}
	return set(keyRecordKey(k.AccountID, k.ID), mustJSON(rec))
}

// digests are the digests the key is found by (the previous one while it is kept).
func (e *keyEntry) digests() [][32]byte {
	sec := e.sec.Load()
	if sec.hasPrev {
		return [][32]byte{sec.cur, sec.prev}
	}
	return [][32]byte{sec.cur}
}

// CreateKey makes a new API key for the account and returns it in full, once.
func (s *Badger) CreateKey(ctx context.Context, accountID string, mode ledger.Mode, name string, expires time.Time) (string, ledger.Key, error) {
	return s.CreateKeyCapped(ctx, accountID, mode, name, expires, 0)
}

// CreateKeyCapped is CreateKey with a cap on the account's unrevoked keys (ledger/roles.go).
func (s *Badger) CreateKeyCapped(ctx context.Context, accountID string, mode ledger.Mode, name string, expires time.Time, maxActive int) (string, ledger.Key, error) {
	return s.createKey(accountID, "", mode, name, expires, maxActive)
}

// createKey is CreateKeyCapped for a key made by memberID ("" for the account's own).
func (s *Badger) createKey(accountID, memberID string, mode ledger.Mode, name string, expires time.Time, maxActive int) (string, ledger.Key, error) {
	t := s.now().UTC()
	expires, err := ledger.CheckKeyRequest(mode, name, expires, t)
	if err != nil {
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
	if maxActive > 0 {
		// Held until the new key is in a.keys, so the next creator counts it.
		a.keyCreateMu.Lock()
		defer a.keyCreateMu.Unlock()
		a.mu.Lock()
		active := 0
		for _, k := range a.keys {
			if k.rec.Load().Revoked.IsZero() {
				active++
			}
		}
		a.mu.Unlock()
		if active >= maxActive {
			return "", ledger.Key{}, fmt.Errorf("account %q has %d keys: %w", accountID, active, ledger.ErrTooManyKeys)
		}
	}
	full := ledger.NewFullKey(mode)
	e := &keyEntry{acct: a}
	digest := sha256.Sum256([]byte(full))
	e.sec.Store(&keySecrets{cur: digest})
	// 12 Base62 characters: a collision is as likely as guessing a key; the account's own keys
	// are checked all the same.
	for e.id == "" {
		e.id = ledger.NewKeyID()
		a.mu.Lock()
		if _, err := findKeyLocked(a, e.id); err == nil {
			e.id = ""
		}
		a.mu.Unlock()
	}
	k := ledger.Key{
		ID:        e.id,
		AccountID: a.id,
		Mode:      mode,
		Name:      name,
		Prefix:    full[:len(ledger.LivePrefix)],
		Last4:     full[len(full)-4:],
		Created:   t,
		Expires:   expires,
		MemberID:  memberID,
	}
	e.rec.Store(&k)
	hashVal := append([]byte(a.id), e.id...)
	op := s.c.enqueue([]write{e.recordWrite(k), set(keyHashKey(digest), hashVal)})
	if err := op.wait(); err != nil {
		return "", ledger.Key{}, err
	}
	// The key becomes usable only once it is durable.
	a.mu.Lock()
	a.keys = append(a.keys, e)
	a.mu.Unlock()
	s.cacheMu.Lock()
	s.byDigest[digest] = e // a is pinned: it is cached
	s.cacheMu.Unlock()
	return full, k, nil
}

// ListKeys returns the account's keys, oldest first, revoked ones included.
func (s *Badger) ListKeys(ctx context.Context, accountID string) ([]ledger.Key, error) {
	if s.life.Closed.Load() {
		return nil, ledger.ErrClosed
	}
	a, err := s.account(accountID)
	if err != nil {
		return nil, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	out := make([]ledger.Key, 0, len(a.keys))
	for _, e := range a.keys {
		out = append(out, e.key())
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y ledger.Key) int {
		if c := x.Created.Compare(y.Created); c != 0 {
			return c
		}
		return compareStrings(x.ID, y.ID)
	})
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RevokeKey revokes a key at once: the next LookupKey of it fails.
func (s *Badger) RevokeKey(ctx context.Context, accountID, keyID string) (ledger.Key, error) {
	if err := s.beginChange(); err != nil {
		return ledger.Key{}, err
	}
	defer s.life.End()
	a, err := s.account(accountID)
	if err != nil {
		return ledger.Key{}, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	var e *keyEntry
	for _, k := range a.keys {
		if k.id == keyID {
			e = k
		}
	}
	if e == nil {
		a.mu.Unlock()
		return ledger.Key{}, fmt.Errorf("key %q of account %q: %w", keyID, accountID, ledger.ErrNotFound)
	}
	u := e.used.Load()
	k := e.keyWith(u)
	if !k.Revoked.IsZero() {
		a.mu.Unlock()
		return k, ledger.ErrAlreadyRevoked
	}
	k.Revoked = s.now().UTC()
	pub := k
	pub.LastUsed = time.Time{}
	e.rec.Store(&pub)
	e.flushed = u
	op := s.c.enqueue([]write{e.recordWrite(k)})
	a.mu.Unlock()
	if err := op.wait(); err != nil {
		return ledger.Key{}, err
	}
	return k, nil
}

// lastUsedGranularity limits how often a busy key's shared last-use word is written, so that
// concurrent requests on one key do not fight over its cache line.
const lastUsedGranularity = int64(time.Second)

// LookupKey finds the key by its digest among the cached accounts' keys or, failing that, in
// the key-hash index on disk, which reads the key's account into the cache. Malformed, unknown and revoked keys, and a
// rolled key's previous secret past its grace period, all give ErrInvalidKey, with no hint
// which; an expired key gives ErrKeyExpired.
func (s *Badger) LookupKey(ctx context.Context, presented string) (ledger.Key, ledger.Account, error) {
	d, ok := keyDigest(presented)
	if !ok {
		return ledger.Key{}, ledger.Account{}, cmp.Or(s.closedErr(), ledger.ErrInvalidKey)
	}
	return s.lookupDigest(d)
}

// closedErr is ErrClosed once the store is closed, else nil.
func (s *Badger) closedErr() error {
	if s.life.Closed.Load() {
		return ledger.ErrClosed
	}
	return nil
}

// lookupDigest is LookupKey of a well-formed key's digest d.
//
//go:noinline
func (s *Badger) lookupDigest(d [32]byte) (ledger.Key, ledger.Account, error) {
	if s.life.Closed.Load() {
		return ledger.Key{}, ledger.Account{}, ledger.ErrClosed
	}
	e := s.keyByDigest(d)
	if e == nil {
		var err error
		if e, err = s.keyFromDisk(d); err != nil || e == nil {
			return ledger.Key{}, ledger.Account{}, cmp.Or(err, ledger.ErrInvalidKey)
		}
	}
	sec := e.sec.Load()
	k := e.rec.Load()
	t := s.now()
	if d != sec.cur && (!sec.hasPrev || d != sec.prev || !t.Before(sec.prevUntil)) {
		return ledger.Key{}, ledger.Account{}, ledger.ErrInvalidKey // a replaced secret past its grace period
	}
	if !k.Revoked.IsZero() {
		return ledger.Key{}, ledger.Account{}, ledger.ErrInvalidKey
	}
	if !k.Expires.IsZero() && !t.Before(k.Expires) {
		return ledger.Key{}, ledger.Account{}, ledger.ErrKeyExpired
	}
	return e.keyWith(e.used.Load()), *e.acct.rec.Load(), nil
}

// keyDigest checks the format of a presented key and returns its SHA-256 digest. The lookups
// call it before the frame that finds the key (lookupDigest), never inlined, so that SHA-256
// does not run on top of that frame: every request's key is checked on the stack of its
// connection goroutine, which keeps its deepest size for as long as the stream runs, and a
// few hundred bytes more at this moment took it past 16 KiB, doubling every open stream's
// stack (TestStreamStack).
//
//go:noinline
func keyDigest(presented string) (d [32]byte, ok bool) {
	var buf [ledger.KeyLen]byte
	if _, ok := ledger.CheckKeyFormatInto(presented, &buf); !ok {
		return d, false
	}
	return sha256.Sum256(buf[:]), true
}

// keyFromDisk finds the key of digest d through the key-hash index on disk and reads its
// account, with its keys, into the cache; nil when no key has that digest (or it is a secret
// being replaced). Like a cached entry, the entry it returns is read without a pin. Never
// inlined, for the reason loadAccount is not.
//
//go:noinline
func (s *Badger) keyFromDisk(d [32]byte) (*keyEntry, error) {
	acct, err := s.keyAccount(d)
	if err != nil || acct == "" {
		return nil, err
	}
	a, err := s.account(acct)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.unpin(a)
	return s.keyByDigest(d), nil
}

// noteUse records a use of the key at t (a hold made with it): its last-use time, written with
// the hold's key record or by the next flush.
func (e *keyEntry) noteUse(t time.Time) {
	tn := t.UnixNano()
	if old := e.used.Load(); tn-old >= lastUsedGranularity {
		e.used.CompareAndSwap(old, tn)
	}
}

// LookupKeyBalance is LookupKey and Balance (ledger/roles.go); both read the cached account.
func (s *Badger) LookupKeyBalance(ctx context.Context, presented string) (ledger.Key, ledger.Account, ledger.Balance, error) {
	d, ok := keyDigest(presented)
	if !ok {
		return ledger.Key{}, ledger.Account{}, ledger.Balance{}, cmp.Or(s.closedErr(), ledger.ErrInvalidKey)
	}
	k, a, err := s.lookupDigest(d)
	if err != nil {
		return ledger.Key{}, ledger.Account{}, ledger.Balance{}, err
	}
	b, err := s.Balance(ctx, a.ID)
	return k, a, b, err
}

// lastUsedWrites returns the writes of the account's keys whose last use changed since it was
// last written, and counts them written. Called with a.mu held.
func (a *account) lastUsedWrites() []write {
	var ws []write
	for _, e := range a.keys {
		if u := e.used.Load(); u > e.flushed {
			ws = append(ws, e.recordWrite(e.keyWith(u)))
			e.flushed = u
		}
	}
	return ws
}

// flushLastUsed writes the last-use times that changed since the last flush. admit is false when
// called from Close, which already excludes other calls.
func (s *Badger) flushLastUsed(admit bool) error {
	if admit {
		if err := s.beginWrite(); err != nil {
			return nil // closing (Close flushes), or the disk is nearly full (a later flush will)
		}
		defer s.life.End()
	}
	// Only cached accounts have last-use times not yet written (an account with one is kept).
	var ops []*pendingOp
	accts := s.cachedAccounts()
	defer func() {
		for _, a := range accts {
			s.unpin(a)
		}
	}()
	for _, a := range accts {
		a.mu.Lock()
		if ws := a.lastUsedWrites(); len(ws) > 0 {
			ops = append(ops, s.c.enqueue(ws))
		}
		a.mu.Unlock()
	}
	var first error
	for _, op := range ops {
		if err := op.wait(); err != nil && first == nil {
			first = err
		}
	}
	if n := len(ops); n > 0 {
		s.log.Debug("flushed key last-use times", zap.Int("accounts", n))
	}
	return first
}
