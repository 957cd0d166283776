package badgerledger

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/caddy-textgen/textgen/ledger"
)

// Options configures Open. The zero value is a durable, production-ready configuration.
type Options struct {
	// DisableSyncWrites turns off the fsync of every commit. Default: false, so every write is
	// synced. The ledger holds money-like state: a purchase or a charge that was acknowledged
	// must survive a power loss, and syncing costs little because concurrent callers share one
	// sync (see ledger/doc.go). Only tests and throw-away benchmarks should set it.
	//
	// The field is a "disable" switch rather than a SyncWrites bool so that a zero Options (or
	// a forgotten field) can never silently drop durability.
	DisableSyncWrites bool `json:"disable_sync_writes,omitempty"`

	// Now is the clock the store reads for every time it records or compares: hold, session
	// and token expiry, entry times, the 24 h of an Idempotency-Key. Default: time.Now. Tests
	// set it instead of sleeping.
	Now func() time.Time `json:"-"`

	// HoldTTL is how long a hold may stay open before the sweep voids it with reason "expired".
	// Default: 15 minutes, a few minutes past the longest generation the handler allows.
	HoldTTL time.Duration `json:"hold_ttl,omitempty"`

	// SweepInterval is how often open holds are checked for expiry. Default: 30 seconds.
	// A negative value disables the background sweep (Open still voids expired holds).
	SweepInterval time.Duration `json:"sweep_interval,omitempty"`

	// GCInterval is how often the value-log garbage collector runs (RunValueLogGC(0.5) until it
	// has nothing to rewrite). Default: 5 minutes. A negative value disables it.
	GCInterval time.Duration `json:"gc_interval,omitempty"`

	// LastUsedFlushInterval is how often API keys' last-use times, kept in memory by Hold,
	// are written to disk. They are also written at Close. Default: 1 minute. A negative value
	// disables the periodic flush.
	LastUsedFlushInterval time.Duration `json:"last_used_flush_interval,omitempty"`

	// SpaceReserve is the free space the ledger's file system must keep: below it the store
	// refuses new work (ErrUnavailable) until space is freed, while holds already taken are
	// still settled or voided within the reserve. Badger writes through memory-mapped files, and
	// a write the file system cannot place kills the process (SIGBUS), so the ledger must stop
	// well before the disk is full. Default (0): 5% of the file system, at least 16 MiB and at
	// most 256 MiB. A negative value turns the check off.
	SpaceReserve int64 `json:"space_reserve,omitempty"`

	// SpaceCheckInterval is how often the free space is checked in the background (it is also
	// checked before every commit). Default: 1 second.
	SpaceCheckInterval time.Duration `json:"space_check_interval,omitempty"`

	// Logger receives the ledger's and Badger's log messages. Default: zap.NewNop().
	Logger *zap.Logger `json:"-"`

	// CacheAccounts is how many accounts the store keeps in memory once their calls are done:
	// an account's record, balances, open holds and keys are read from disk on first use and
	// kept while used; past this many, those least recently used are let go (an account with an
	// open hold is always kept). Each costs about 5 KB of heap with two keys. Default: 50,000
	// (about 250 MB). The store holds every account in use whatever the size.
	CacheAccounts int `json:"cache_accounts,omitempty"`

	// InMemory keeps everything in memory and nothing on disk (dir must be ""). For unit tests
	// only. Default: false.
	InMemory bool `json:"in_memory,omitempty"`
}

// DefaultGCInterval is the default of Options.GCInterval. DefaultHoldTTL, DefaultSweepInterval
// and DefaultLastUsedFlushInterval are in ledger/types.go: every engine shares them.
const DefaultGCInterval = 5 * time.Minute

func (o Options) withDefaults() (Options, error) {
	if o.HoldTTL < 0 {
		return o, fmt.Errorf("hold_ttl must not be negative: %w", ledger.ErrInvalidArgument)
	}
	o.HoldTTL = cmp.Or(o.HoldTTL, ledger.DefaultHoldTTL)
	if o.Now == nil {
		o.Now = time.Now
	}
	o.SweepInterval = cmp.Or(o.SweepInterval, ledger.DefaultSweepInterval)
	o.GCInterval = cmp.Or(o.GCInterval, DefaultGCInterval)
	o.LastUsedFlushInterval = cmp.Or(o.LastUsedFlushInterval, ledger.DefaultLastUsedFlushInterval)
	if o.CacheAccounts < 0 {
		return o, fmt.Errorf("cache_accounts must not be negative: %w", ledger.ErrInvalidArgument)
	}
	o.CacheAccounts = cmp.Or(o.CacheAccounts, DefaultCacheAccounts)
	if o.SpaceCheckInterval <= 0 {
		o.SpaceCheckInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o, nil
}

// memTableSize bounds the memory a store uses, and the disk one memtable's log takes (twice it,
// the space guard's minimum reserve); 8 MiB still leaves room for a 1.2 MiB batch (Badger
// allows 15% of a memtable per transaction), above maxBatchBytes.
const memTableSize = 8 << 20

// badgerOptions tunes Badger for a small footprint: the ledger's values are small JSON records
// and its working set (accounts, keys, balances, open holds) lives in Go memory anyway.
func badgerOptions(dir string, o Options) badger.Options {
	var bo badger.Options
	if o.InMemory {
		bo = badger.DefaultOptions("").WithInMemory(true)
	} else {
		bo = badger.DefaultOptions(dir).WithSyncWrites(!o.DisableSyncWrites)
	}
	return bo.
		WithLogger(zapBadgerLogger{o.Logger.Named("badger")}).
		// Every transaction the ledger commits is blind (it never reads inside a read-write
		// transaction), so conflict tracking would only cost memory.
		WithDetectConflicts(false).
		WithMemTableSize(memTableSize).
		WithNumMemtables(3).
		WithBlockCacheSize(16 << 20).
		WithNumCompactors(2).
		WithNumGoroutines(2).
		WithValueLogFileSize(64 << 20).
		WithMetricsEnabled(false).
		// No compaction at Close: it writes new tables, which a nearly full disk may not take.
		WithCompactL0OnClose(false)
}

// zapBadgerLogger routes Badger's printf-style logger into zap. It checks the level before
// formatting because Badger calls Debugf on every write batch.
type zapBadgerLogger struct{ l *zap.Logger }

func (l zapBadgerLogger) logf(lvl zapcore.Level, format string, args []any) {
	if ce := l.l.Check(lvl, ""); ce != nil {
		ce.Message = strings.TrimRight(fmt.Sprintf(format, args...), "\n")
		ce.Write()
	}
}

func (l zapBadgerLogger) Errorf(f string, a ...any)   { l.logf(zapcore.ErrorLevel, f, a) }
func (l zapBadgerLogger) Warningf(f string, a ...any) { l.logf(zapcore.WarnLevel, f, a) }
func (l zapBadgerLogger) Infof(f string, a ...any)    { l.logf(zapcore.InfoLevel, f, a) }
func (l zapBadgerLogger) Debugf(f string, a ...any)   { l.logf(zapcore.DebugLevel, f, a) }

// Interface guards
var _ badger.Logger = zapBadgerLogger{}
