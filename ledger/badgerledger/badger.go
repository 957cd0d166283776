package badgerledger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// Badger is the Store kept in a Badger v4 directory. Create it with Open.
//
// The working state of the accounts in use (their keys, balances, open holds, next entry
// numbers) is kept in memory, read from disk on first use into a bounded cache (cache.go);
// every change is applied there under the account's mutex and made durable through the group
// committer before the call returns (see commit.go).
type Badger struct {
	db    *badger.DB
	dir   string // the directory Open was given, made absolute; "" in memory
	opts  Options
	log   *zap.Logger
	space *spaceGuard // the disk's free space (space.go)
	// readOnly: Badger was opened read-only because the disk was nearly full at Open; every
	// change is refused until reopenWritable. bopts are the options to reopen with.
	readOnly atomic.Bool
	bopts    badger.Options
	// unlock releases the directory lock the store holds for Badger (lockDir).
	unlock func()
	// voidPending: Open left the previous process's holds open because the disk was nearly
	// full; they are voided when space is back.
	voidPending atomic.Bool
	// opened is when this process opened the directory. Badger locks the directory, so nothing
	// that began before it can still be running: holds and Idempotency-Keys left "in progress"
	// then belong to a process that is gone (restart.go's rules).
	opened time.Time
	c      *committer
	kept   *keptStore // the kept generations (kept.go)
	// openHolds counts the holds open in memory: generations whose settle or void will come
	// (the committer's group window uses it).
	openHolds atomic.Int64

	// Every call that writes or reads Badger is admitted by begin (life's Begin, and no failed
	// commit) and released by life.End, so Close waits for calls in flight.
	life ledger.Lifecycle

	createMu sync.Mutex // serialises CreateAccount (email uniqueness)
	alertMu  sync.Mutex // serialises the alert outbox's changes (alerts.go)
	mailMu   sync.Mutex // serialises the outbox's claims and the tokens' consumption (outbox.go, tokens.go)
	payMu    sync.Mutex // serialises recording and resolving unmatched payments (payments.go)
	rcptMu   sync.Mutex // serialises adding receipt keys (receipts.go)
	opMu     sync.Mutex // serialises the operators' records and console sessions (operators.go)
	revMu    sync.Mutex // serialises recording payments and applying reversals (reversals.go)
	codeMu   sync.Mutex // serialises changes of redemption codes and redemptions (codes.go)
	topUpMu  sync.Mutex // serialises changes of top-up rules and top-ups (topups.go)

	// The account cache (cache.go): the accounts in memory, and their keys by digest.
	cacheMu   sync.RWMutex
	cached    map[string]*account
	byDigest  map[[32]byte]*keyEntry
	loadMu    [loadShards]sync.Mutex
	evicting  atomic.Bool
	loads     atomic.Uint64
	evictions atomic.Uint64
	// lowAlerted is the accounts with a low-balance alert (low_balance_set.go); nil until first
	// needed.
	lowAlertMu sync.Mutex
	lowAlerted map[string]struct{}
	// someLots and someOrgs: the ledger may hold a lot, an organisation's member (set at Open
	// from what is on disk, and before the first is written); while false a load does not look.
	someLots, someOrgs atomic.Bool
	// diskHolds: the previous process's open holds may still be on disk (until voidPrevious).
	diskHolds atomic.Bool
}

// Open opens (or creates) the ledger in dir, voids holds that expired
// while it was closed, and starts the background sweep, value-log GC and last-use flush. Badger
// locks the directory: one process, one Open at a time.
func Open(dir string, opts Options) (*Badger, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.InMemory != (dir == "") {
		return nil, fmt.Errorf("opening ledger: a directory is required unless in_memory is set, and not allowed with it: %w", ledger.ErrInvalidArgument)
	}
	unlock, locked := func() {}, false
	if !opts.InMemory {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("opening ledger %q: %w", dir, err)
		}
		if unlock, locked, err = lockDir(dir); err != nil {
			return nil, fmt.Errorf("opening ledger %q: %w", dir, err)
		}
		if err := removeEmptyLogs(dir, opts.Logger, locked); err != nil {
			unlock()
			return nil, fmt.Errorf("opening ledger %q: removing empty log files: %w", dir, err)
		}
	}
	space, err := newSpaceGuard(dir, opts.SpaceReserve, opts.Logger)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("opening ledger %q: %w", dir, err)
	}
	// On a nearly full disk Badger is opened read-only: a read-write open writes a new
	// memtable's header through a memory map, which a full disk answers with SIGBUS. The store
	// serves reads, refuses every change, and reopens read-write when space is back.
	readOnly := !opts.InMemory && space.err() != nil
	if readOnly {
		// A directory left by a crash (or by a Close on a full disk) holds a write-ahead log
		// that Badger must replay and then truncate, which a read-only open cannot do: Badger
		// stops the process on it, and on a full tmpfs its read of the log's unwritten tail dies
		// of SIGBUS first. Such a ledger is not opened until there is space (the caller may try
		// again; Caddy's app does, answering 503 meanwhile).
		if replay := logsToReplay(dir); len(replay) > 0 {
			unlock()
			return nil, fmt.Errorf("opening ledger %q: its write-ahead log (%s) must be replayed, which needs space: %w",
				dir, strings.Join(replay, ", "), space.err())
		}
	}
	bopts := badgerOptions(dir, opts).WithBypassLockGuard(locked)
	db, err := badger.Open(bopts.WithReadOnly(readOnly))
	if err != nil {
		unlock()
		return nil, fmt.Errorf("opening ledger %q: %w", dir, err)
	}
	s := &Badger{
		db:       db,
		dir:      absDir(dir),
		bopts:    bopts,
		unlock:   unlock,
		space:    space,
		opened:   opts.Now().UTC(),
		opts:     opts,
		log:      opts.Logger,
		cached:   map[string]*account{},
		byDigest: map[[32]byte]*keyEntry{},
	}
	s.diskHolds.Store(true)
	s.life.StartLifecycle()
	s.c = newCommitter(db, opts.Logger, space)
	s.c.siblings = s.openHolds.Load
	s.kept = newKeptStore(dir, opts, locked)
	s.readOnly.Store(readOnly)
	fail := func(err error) (*Badger, error) {
		s.c.close()
		db.Close()
		unlock()
		return nil, err
	}
	if err := s.checkSchema(readOnly); err != nil {
		return fail(fmt.Errorf("opening ledger %q: %w", dir, err))
	}
	if err := db.View(func(txn *badger.Txn) error {
		for _, f := range []struct {
			prefix byte
			flag   *atomic.Bool
		}{{prefixLot, &s.someLots}, {prefixMember, &s.someOrgs}} {
			n, err := countKeysUpTo(txn, []byte{f.prefix}, 1)
			if err != nil {
				return err
			}
			f.flag.Store(n > 0)
		}
		return nil
	}); err != nil {
		return fail(fmt.Errorf("opening ledger %q: %w", dir, err))
	}
	if s.someLots.Load() && !readOnly {
		if err := indexLots(db); err != nil {
			return fail(fmt.Errorf("opening ledger %q: indexing its lots by expiry: %w", dir, err))
		}
	}
	s.opened = s.now().UTC()
	if err := s.space.err(); err != nil {
		// Start on a full disk: serve reads, refuse new work, and void the holds once there
		// is space.
		s.voidPending.Store(true)
		s.log.Warn("the previous process's open holds are voided when the ledger's disk has space again", zap.Error(err))
	} else if err := s.voidPrevious(); err != nil {
		return fail(err)
	}
	s.life.Every(opts.SpaceCheckInterval, func() {
		s.space.check()
		if s.space.err() == nil && s.readOnly.Load() {
			if err := s.reopenWritable(); err != nil {
				s.log.Error("reopening the ledger for writing", zap.Error(err))
				return
			}
		}
		if s.space.err() == nil && s.voidPending.Load() {
			if err := s.voidPrevious(); err != nil && !errors.Is(err, ledger.ErrClosed) {
				s.log.Error("voiding the previous process's holds", zap.Error(err))
			}
		}
	})
	// Kept generations whose window ended while the store was closed go at once (Badger's TTL
	// hides them already; this deletes them).
	if !readOnly {
		s.dropExpiredGenerations()
		if err := s.dropLegacyGenerations(context.Background()); err != nil {
			s.log.Warn("deleting generations an earlier version kept in the ledger's directory (they expire anyway)", zap.Error(err))
		}
	}
	s.life.Every(opts.SweepInterval, func() {
		if n, err := s.sweep(); err != nil && !errors.Is(err, ledger.ErrClosed) {
			s.log.Error("hold expiry sweep failed", zap.Error(err))
		} else if n > 0 {
			s.log.Info("voided expired holds", zap.Int("holds", n))
		}
		if s.space.err() == nil && !s.readOnly.Load() {
			s.dropExpiredGenerations()
		}
	})
	if !opts.InMemory {
		s.life.Every(opts.GCInterval, s.runGC)
	}
	s.life.Every(opts.LastUsedFlushInterval, func() {
		if err := s.flushLastUsed(true); err != nil {
			s.log.Error("flushing key last-use times failed", zap.Error(err))
		}
	})
	return s, nil
}

// dropExpiredGenerations deletes the kept generations whose window has ended, and logs a failure.
func (s *Badger) dropExpiredGenerations() {
	if n, err := s.DeleteExpiredGenerations(context.Background()); err != nil && !errors.Is(err, ledger.ErrClosed) {
		s.log.Error("deleting expired generations failed", zap.Error(err))
	} else if n > 0 {
		s.log.Debug("deleted expired generations", zap.Int("generations", n))
	}
}

func (s *Badger) checkSchema(readOnly bool) error {
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
	case errors.Is(err, badger.ErrKeyNotFound) && readOnly:
		return fmt.Errorf("a new ledger cannot be created on a nearly full disk: %w", s.space.err())
	case errors.Is(err, badger.ErrKeyNotFound):
		return s.c.enqueue([]write{set(metaSchemaKey, []byte(schemaVersion))}).wait()
	case err != nil:
		return err
	case string(v) != schemaVersion:
		return fmt.Errorf("ledger schema version %q is not %q", v, schemaVersion)
	}
	return nil
}

func (s *Badger) runGC() {
	if s.beginWrite() != nil { // the GC rewrites value logs: not while the disk is nearly full
		return
	}
	defer s.life.End()
	s.kept.runGC()
	for {
		select {
		case <-s.life.Stopping():
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

// voidPrevious voids the holds a previous process left open (voidLeftOver), once.
func (s *Badger) voidPrevious() error {
	n, err := s.voidLeftOver()
	if err != nil {
		return fmt.Errorf("voiding the holds of the previous process: %w", err)
	}
	s.voidPending.Store(false)
	s.diskHolds.Store(false)
	if n > 0 {
		s.log.Info("voided the holds the previous process left open", zap.Int("holds", n))
	}
	return nil
}

// reopenWritable replaces a read-only Badger (opened on a nearly full disk) with a read-write
// one, once there is space. It waits for the calls in flight; none of them changed anything.
func (s *Badger) reopenWritable() error {
	s.life.CloseMu.Lock()
	defer s.life.CloseMu.Unlock()
	if s.life.Closed.Load() || !s.readOnly.Load() {
		return nil
	}
	db, err := badger.Open(s.bopts.WithReadOnly(false))
	if err != nil {
		return err
	}
	old := s.db
	s.c.swapDB(db)
	s.db = db
	s.readOnly.Store(false)
	if err := old.Close(); err != nil {
		s.log.Warn("closing the read-only ledger", zap.Error(err))
	}
	s.log.Info("the ledger's disk has space again: reopened for writing")
	return nil
}

// errReadOnly: the store was opened read-only on a full disk (Open) and waits for space.
var errReadOnly = fmt.Errorf("%w: opened read-only, writes wait for space", ledger.ErrDiskFull)

// beginChange admits a call that changes the ledger: begin, and ErrUnavailable while it is
// open read-only (a full disk at start).
func (s *Badger) beginChange() error {
	if s.readOnly.Load() {
		return errReadOnly
	}
	return s.begin()
}

// beginWrite admits a call that starts new work (a hold, a grant, a key, an account, a
// session...): begin, and ErrUnavailable while the disk is nearly full. Calls that finish work
// already begun (settling or voiding a hold) or that protect the account (revoking a key,
// disabling an account) use begin alone and run within the space reserve.
func (s *Badger) beginWrite() error {
	if err := s.space.err(); err != nil {
		return err
	}
	return s.beginChange()
}

// Health reports whether the store takes new work: nil, or why not (ErrUnavailable with the
// reason, ErrClosed, or the error of a failed commit).
func (s *Badger) Health(ctx context.Context) error {
	if s.life.Closed.Load() {
		return ledger.ErrClosed
	}
	if err := s.c.err(); err != nil {
		return err
	}
	if err := s.space.err(); err != nil {
		return err
	}
	if s.readOnly.Load() {
		return errReadOnly
	}
	return nil
}

// begin admits a call that touches Badger (ErrClosed, or the error of a failed commit);
// life.End releases it.
func (s *Badger) begin() error {
	if err := s.life.Begin(); err != nil {
		return err
	}
	if err := s.c.err(); err != nil {
		s.life.End()
		return err
	}
	return nil
}

// Close stops the background work, waits for calls in flight, writes the keys' last-use times
// and closes Badger. It is safe to call more than once.
func (s *Badger) Close() error {
	return s.life.Shutdown(func() error {
		var errs []error
		if err := s.c.err(); err == nil {
			if err := s.flushLastUsed(false); err != nil {
				errs = append(errs, fmt.Errorf("flushing key last-use times: %w", err))
			}
		}
		s.c.close()
		if err := s.kept.close(s.space.err()); err != nil {
			errs = append(errs, fmt.Errorf("closing the kept generations: %w", err))
		}
		if err := s.space.err(); err != nil && !s.readOnly.Load() {
			// Badger's Close writes its memtable out as a table through a memory map, which a
			// full disk answers with SIGBUS. Every commit is synced already, so the directory
			// is left as a crash leaves it, and opens normally next time; Badger's files stay
			// open until the process exits (Caddy is stopping, or the config no longer names
			// this ledger).
			s.log.Warn("the ledger's disk is nearly full: closing without flushing its memtable (the next open replays its log)", zap.Error(err))
		} else if err := s.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing ledger: %w", err))
		}
		s.unlock()
		return errors.Join(errs...)
	})
}

// Interface guards
var _ ledger.Store = (*Badger)(nil)

// now is the store's clock (Options.Now).
func (s *Badger) now() time.Time { return s.opts.Now() }

// absDir is dir made absolute, as far as the system can tell it ("" stays "").
func absDir(dir string) string {
	if dir == "" {
		return ""
	}
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}
