package ledger

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// now is the ledger's clock; tests replace it instead of sleeping.
var now = time.Now

// Badger is the Store kept in a Badger v4 directory. Create it with Open.
//
// The authoritative working state (accounts, keys, balances, open holds, next entry numbers)
// is kept in memory, loaded at Open; every change is applied there under the account's mutex
// and made durable through the group committer before the call returns (see badger_commit.go).
type Badger struct {
	db   *badger.DB
	opts Options
	log  *zap.Logger
	c    *committer

	// closeMu is held shared by every call that writes or reads Badger and exclusively by
	// Close, so Close waits for calls in flight.
	closeMu   sync.RWMutex
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stopBg    chan struct{}
	bg        sync.WaitGroup

	createMu sync.Mutex // serialises CreateAccount (email uniqueness)

	acctMu   sync.RWMutex
	accounts map[string]*account
	byEmail  map[string]*account
	acctIDs  []string // sorted, for ListAccounts

	keyMu    sync.RWMutex
	byDigest map[[32]byte]*keyEntry
	keyIDs   map[string]*keyEntry
}

// account is the in-memory state of one account.
type account struct {
	id  string
	rec atomic.Pointer[Account] // replaced, never mutated; read without mu
	// sessMu orders CreateSession with SetPassword (which ends the account's sessions); it is
	// not mu, so a password change never stalls the account's holds behind its disk sync.
	sessMu sync.Mutex

	mu       sync.Mutex
	bal      int64 // live balance
	testBal  int64
	held     int64 // open live holds
	testHeld int64
	nextSeq  uint64 // seq of the account's next entry; the first is 1
	// holds has every open hold, plus resolved holds until their resolution is durable (after
	// that, a repeated call reads the hold record from disk).
	holds  map[string]*holdMem
	refs   map[string]*refMem  // grant references whose entry is not yet known durable
	idem   map[string]*idemMem // idempotency records not yet known durable
	recent []recentItem        // resolutions/refs/idem writes in op order, for prune
	keys   []*keyEntry
}

type holdMem struct {
	rec holdRecord
	op  uint64 // operation that last wrote rec
}

type refMem struct {
	entry Entry
	op    uint64
}

type idemMem struct {
	rec IdempotencyRecord
	op  uint64
}

type recentItem struct {
	kind byte // 'h' hold, 'r' grant reference, 'i' idempotency record
	key  string
	op   uint64
}

// prune forgets in-memory copies that snap shows, so that later checks read them from snap.
// Called with a.mu held.
func (a *account) prune(snap *snapshot) {
	i := 0
	for ; i < len(a.recent) && a.recent[i].op <= snap.upTo; i++ {
		it := a.recent[i]
		switch it.kind {
		case 'h':
			if h := a.holds[it.key]; h != nil && h.op == it.op && h.rec.State != HoldOpen {
				delete(a.holds, it.key)
			}
		case 'r':
			if r := a.refs[it.key]; r != nil && r.op == it.op {
				delete(a.refs, it.key)
			}
		case 'i':
			if r := a.idem[it.key]; r != nil && r.op == it.op {
				delete(a.idem, it.key)
			}
		}
	}
	if i == len(a.recent) {
		a.recent = a.recent[:0]
	} else {
		a.recent = a.recent[i:]
	}
}

// figures returns balance and open holds for mode. Called with a.mu held.
func (a *account) figures(m Mode) (bal, held int64) {
	if m == Test {
		return a.testBal, a.testHeld
	}
	return a.bal, a.held
}

func (a *account) add(m Mode, dBal, dHeld int64) {
	if m == Test {
		a.testBal += dBal
		a.testHeld += dHeld
	} else {
		a.bal += dBal
		a.held += dHeld
	}
}

func (a *account) balance() Balance {
	return Balance{
		AccountID:     a.id,
		Balance:       a.bal,
		Available:     a.bal - a.held,
		TestBalance:   a.testBal,
		TestAvailable: a.testBal - a.testHeld,
	}
}

// appendEntry records one change of the account's credits: it gives e the next entry number,
// the account, the time t and the figures after applying dBal to the balance and dHeld to the
// open holds of e.Mode, and returns it with the entry's and the balance record's writes. Every
// change of credits goes through here, so the "after" figures are computed one way. Called with
// a.mu held.
func (a *account) appendEntry(e Entry, dBal, dHeld int64, t time.Time) (Entry, []write) {
	e.Seq, e.AccountID, e.Amount, e.Time = a.nextSeq, a.id, dBal, t
	a.nextSeq++
	a.add(e.Mode, dBal, dHeld)
	bal, held := a.figures(e.Mode)
	e.BalanceAfter, e.AvailableAfter = bal, bal-held
	return e, []write{set(entryKey(a.id, e.Seq), mustJSON(e)), a.balanceWrite()}
}

// balanceWrite is the account's balance record as it is now. Called with a.mu held.
func (a *account) balanceWrite() write {
	return set(balanceKey(a.id), mustJSON(balanceRecord{
		Balance: a.bal, TestBalance: a.testBal, NextSeq: a.nextSeq,
	}))
}

// balanceRecord is the stored form of an account's balances (prefixBalance). Open holds are not
// stored here: they are counted from the open-hold index.
type balanceRecord struct {
	Balance     int64  `json:"balance"`
	TestBalance int64  `json:"test_balance"`
	NextSeq     uint64 `json:"next_seq"`
}

// holdRecord is the stored form of a hold (prefixHold).
type holdRecord struct {
	AccountID  string    `json:"account_id"`
	RequestID  string    `json:"request_id"`
	Mode       Mode      `json:"mode"`
	State      HoldState `json:"state"`
	KeyID      string    `json:"key_id,omitempty"`
	Tool       string    `json:"tool,omitempty"`
	Created    time.Time `json:"created"`
	Expires    time.Time `json:"expires"`
	HoldSeq    uint64    `json:"hold_seq"`
	Resolved   time.Time `json:"resolved,omitzero"`
	ResolveSeq uint64    `json:"resolve_seq,omitempty"`
	Reason     string    `json:"reason,omitempty"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs of strings, numbers and times are marshalled here.
		panic(fmt.Sprintf("ledger: marshalling %T: %v", v, err))
	}
	return b
}

func seqBytes(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// Open opens (or creates) the ledger in dir, loads its working state, voids holds that expired
// while it was closed, and starts the background sweep, value-log GC and last-use flush. Badger
// locks the directory: one process, one Open at a time.
func Open(dir string, opts Options) (*Badger, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.InMemory != (dir == "") {
		return nil, fmt.Errorf("opening ledger: a directory is required unless in_memory is set, and not allowed with it: %w", ErrInvalidArgument)
	}
	if !opts.InMemory {
		if err := removeEmptyLogs(dir, opts.Logger); err != nil {
			return nil, fmt.Errorf("opening ledger %q: removing empty log files: %w", dir, err)
		}
	}
	db, err := badger.Open(badgerOptions(dir, opts))
	if err != nil {
		return nil, fmt.Errorf("opening ledger %q: %w", dir, err)
	}
	s := &Badger{
		db:       db,
		opts:     opts,
		log:      opts.Logger,
		stopBg:   make(chan struct{}),
		accounts: map[string]*account{},
		byEmail:  map[string]*account{},
		byDigest: map[[32]byte]*keyEntry{},
		keyIDs:   map[string]*keyEntry{},
	}
	s.c = newCommitter(db, opts.Logger)
	fail := func(err error) (*Badger, error) {
		s.c.close()
		db.Close()
		return nil, err
	}
	if err := s.checkSchema(); err != nil {
		return fail(fmt.Errorf("opening ledger %q: %w", dir, err))
	}
	if err := s.load(); err != nil {
		return fail(fmt.Errorf("loading ledger %q: %w", dir, err))
	}
	if _, err := s.sweep(); err != nil {
		return fail(fmt.Errorf("voiding expired holds: %w", err))
	}
	s.every(opts.SweepInterval, func() {
		if n, err := s.sweep(); err != nil && !errors.Is(err, ErrClosed) {
			s.log.Error("hold expiry sweep failed", zap.Error(err))
		} else if n > 0 {
			s.log.Info("voided expired holds", zap.Int("holds", n))
		}
	})
	if !opts.InMemory {
		s.every(opts.GCInterval, s.runGC)
	}
	s.every(opts.LastUsedFlushInterval, func() {
		if err := s.flushLastUsed(true); err != nil {
			s.log.Error("flushing key last-use times failed", zap.Error(err))
		}
	})
	return s, nil
}

func (s *Badger) checkSchema() error {
	var v []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(metaSchemaKey)
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return s.c.enqueue([]write{set(metaSchemaKey, []byte(schemaVersion))}).wait()
	case err != nil:
		return err
	case string(v) != schemaVersion:
		return fmt.Errorf("ledger schema version %q is not %q", v, schemaVersion)
	}
	return nil
}

// every runs f every d until Close; d < 0 disables it.
func (s *Badger) every(d time.Duration, f func()) {
	if d < 0 {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-s.stopBg:
				return
			case <-t.C:
				f()
			}
		}
	}()
}

func (s *Badger) runGC() {
	if s.begin() != nil {
		return
	}
	defer s.end()
	for {
		select {
		case <-s.stopBg:
			return
		default:
		}
		err := s.db.RunValueLogGC(0.5)
		if err == nil {
			continue
		}
		if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
			s.log.Warn("value log GC failed", zap.Error(err))
		}
		return
	}
}

// iterate calls f with a copy of every value under prefix, in key order.
func iterate(txn *badger.Txn, prefix []byte, f func(k, v []byte) error) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
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

// load reads the working state into memory.
func (s *Badger) load() error {
	return s.db.View(func(txn *badger.Txn) error {
		err := iterate(txn, []byte{prefixAccount}, func(k, v []byte) error {
			var rec Account
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("account %q: %w", k[1:], err)
			}
			a := newAccount(rec)
			s.accounts[rec.ID] = a
			s.byEmail[rec.Email] = a
			s.acctIDs = append(s.acctIDs, rec.ID)
			return nil
		})
		if err != nil {
			return err
		}
		sort.Strings(s.acctIDs)
		err = iterate(txn, []byte{prefixBalance}, func(k, v []byte) error {
			a := s.accounts[string(k[1:])]
			if a == nil {
				return fmt.Errorf("balance record for unknown account %q", k[1:])
			}
			var rec balanceRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("balance of %q: %w", a.id, err)
			}
			a.bal, a.testBal, a.nextSeq = rec.Balance, rec.TestBalance, rec.NextSeq
			return nil
		})
		if err != nil {
			return err
		}
		for _, a := range s.accounts {
			if a.nextSeq == 0 {
				return fmt.Errorf("account %q has no balance record", a.id)
			}
		}
		err = iterate(txn, []byte{prefixOpenHold}, func(k, _ []byte) error {
			if len(k) < 1+accountIDLen {
				return fmt.Errorf("malformed open-hold key %q", k)
			}
			acct, rid := string(k[1:1+accountIDLen]), string(k[1+accountIDLen:])
			a := s.accounts[acct]
			if a == nil {
				return fmt.Errorf("open hold %q for unknown account %q", rid, acct)
			}
			rec, err := getHold(txn, acct, rid)
			if err != nil {
				return fmt.Errorf("open hold %q of %q: %w", rid, acct, err)
			}
			if rec.State != HoldOpen {
				return fmt.Errorf("hold %q of %q is indexed as open but is %s", rid, acct, rec.State)
			}
			a.holds[rid] = &holdMem{rec: rec}
			a.add(rec.Mode, 0, 1)
			return nil
		})
		if err != nil {
			return err
		}
		return iterate(txn, []byte{prefixKey}, func(k, v []byte) error {
			var rec keyRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("key %q: %w", k[1:], err)
			}
			a := s.accounts[rec.AccountID]
			if a == nil {
				return fmt.Errorf("key %q of unknown account %q", rec.ID, rec.AccountID)
			}
			e, err := newKeyEntry(a, rec)
			if err != nil {
				return err
			}
			a.keys = append(a.keys, e)
			s.byDigest[e.digest] = e
			s.keyIDs[e.id] = e
			return nil
		})
	})
}

func newAccount(rec Account) *account {
	a := &account{
		id:      rec.ID,
		nextSeq: 1,
		holds:   map[string]*holdMem{},
		refs:    map[string]*refMem{},
		idem:    map[string]*idemMem{},
	}
	a.rec.Store(&rec)
	return a
}

// getValue reads one value; ok is false when the key does not exist.
func getValue(txn *badger.Txn, k []byte) (v []byte, ok bool, err error) {
	item, err := txn.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v, err = item.ValueCopy(nil)
	return v, err == nil, err
}

func getHold(txn *badger.Txn, acct, rid string) (holdRecord, error) {
	var rec holdRecord
	v, ok, err := getValue(txn, holdKey(acct, rid))
	if err != nil {
		return rec, err
	}
	if !ok {
		return rec, ErrNotFound
	}
	return rec, json.Unmarshal(v, &rec)
}

// begin admits a call that touches Badger; end releases it.
func (s *Badger) begin() error {
	s.closeMu.RLock()
	if s.closed.Load() {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	if err := s.c.err(); err != nil {
		s.closeMu.RUnlock()
		return err
	}
	return nil
}

func (s *Badger) end() { s.closeMu.RUnlock() }

// account returns the in-memory account or ErrNotFound.
func (s *Badger) account(id string) (*account, error) {
	s.acctMu.RLock()
	a := s.accounts[id]
	s.acctMu.RUnlock()
	if a == nil {
		return nil, fmt.Errorf("account %q: %w", id, ErrNotFound)
	}
	return a, nil
}

func (s *Badger) allAccounts() []*account {
	s.acctMu.RLock()
	defer s.acctMu.RUnlock()
	out := make([]*account, 0, len(s.acctIDs))
	for _, id := range s.acctIDs {
		out = append(out, s.accounts[id])
	}
	return out
}

// Close stops the background work, waits for calls in flight, writes the keys' last-use times
// and closes Badger. It is safe to call more than once.
func (s *Badger) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stopBg)
		s.bg.Wait()
		s.closeMu.Lock()
		defer s.closeMu.Unlock()
		var errs []error
		if err := s.c.err(); err == nil {
			if err := s.flushLastUsed(false); err != nil {
				errs = append(errs, fmt.Errorf("flushing key last-use times: %w", err))
			}
		}
		s.c.close()
		if err := s.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing ledger: %w", err))
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// dirEmpty reports whether dir is missing or an empty directory.
func dirEmpty(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return len(entries) == 0, nil
}

// Interface guards
var _ Store = (*Badger)(nil)
