package textgenapp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
	"github.com/caddy-textgen/textgen/ledger/pgledger"
)

// Caddy provisions a new config before it stops the old one, and Badger locks its directory, so
// a ledger is opened once per directory and shared through a usage pool: a reload joins the open
// database, and the last module to let go closes it. The pool (not a config context) owns the
// database's goroutines, so they live exactly as long as the database.
var ledgers = caddy.NewUsagePool()

// LedgerRef is a module's share of a pooled ledger.
type LedgerRef = Ref[ledger.Store]

// IsDatabaseURL reports a ledger value that names a PostgreSQL database (postgres:// or
// postgresql://) rather than a Badger directory: the choice of engine, made here only.
func IsDatabaseURL(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}

// LedgerPlacement is where the ledger spec names keeps its data, as its engine states it,
// before it is open: whether other instances share it, and its directory on this machine.
// Placeholders are resolved as Ledger resolves them.
func LedgerPlacement(spec string) (ledger.Placement, error) {
	spec = strings.TrimSpace(caddy.NewReplacer().ReplaceAll(spec, ""))
	if IsDatabaseURL(spec) {
		return pgledger.PlacementOf(), nil
	}
	abs, err := LedgerKey(spec)
	if err != nil {
		return ledger.Placement{}, err
	}
	return badgerledger.PlacementOf(abs), nil
}

// LedgerShared reports whether other instances share the ledger spec names; a spec whose
// placement cannot be told is taken as not shared (what it feeds is a warning).
func LedgerShared(spec string) bool {
	p, err := LedgerPlacement(spec)
	return err == nil && p.Shared
}

// LedgerKey is the key under which OpenLedgers lists the ledger spec names: a Badger ledger's
// absolute directory, or a database URL without its password (the admin API lists the keys).
func LedgerKey(spec string) (string, error) {
	if IsDatabaseURL(spec) {
		u, err := url.Parse(spec)
		if err != nil {
			return "", fmt.Errorf("ledger database URL: %w", err)
		}
		return u.Redacted(), nil
	}
	abs, err := caddy.FastAbs(spec)
	if err != nil {
		return "", fmt.Errorf("ledger directory %q: %w", spec, err)
	}
	return abs, nil
}

// openTimeout bounds opening a PostgreSQL ledger (connecting, migrating).
const openTimeout = time.Minute

// newLedgerRef joins (or creates, unopened) the ledger spec names: a Badger directory or a
// PostgreSQL URL. Options count when this call creates the pool entry; every hold carries its own
// handler's TTL anyway. A database that cannot be reached at start, or a Badger directory that
// cannot be opened until its disk has space, does not fail the config: requests get 503
// ledger_unavailable until it opens, and the open is retried.
func newLedgerRef(spec string, opts badgerledger.Options) (*LedgerRef, error) {
	key, err := LedgerKey(spec)
	if err != nil {
		return nil, err
	}
	if IsDatabaseURL(spec) {
		popts := pgledger.PostgresOptions{HoldTTL: opts.HoldTTL, Logger: opts.Logger}
		// Holds of an instance that died are voided by the others' sweeps: sweep a few times
		// per hold TTL, so a hold outlives its TTL by a quarter of it at most.
		if ttl := cmp.Or(opts.HoldTTL, ledger.DefaultHoldTTL); ttl/4 < ledger.DefaultSweepInterval {
			popts.SweepInterval = ttl / 4
		}
		return acquire(ledgers, key,
			func() (ledger.Store, error) {
				ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
				defer cancel()
				db, err := pgledger.OpenPostgres(ctx, spec, popts)
				if err != nil {
					return nil, fmt.Errorf("opening ledger %s: %w", key, err)
				}
				return db, nil
			},
			func(s ledger.Store) error { return s.Close() },
			func(err error) bool { return errors.Is(err, ledger.ErrUnavailable) }, opts.Logger)
	}
	cache := askCache(key, opts.CacheAccounts)
	return acquire(ledgers, key,
		func() (ledger.Store, error) {
			opts.CacheAccounts = int(cache.Load())
			db, err := badgerledger.Open(key, opts)
			if err != nil {
				return nil, fmt.Errorf("opening ledger %s: %w", key, err)
			}
			return db, nil
		},
		func(s ledger.Store) error { return s.Close() },
		// A disk that filled up while the directory has a log to replay: it opens once space
		// is freed.
		func(err error) bool { return errors.Is(err, ledger.ErrDiskFull) }, opts.Logger)
}

// cacheSizes is, per Badger directory, the largest account cache (Options.CacheAccounts) any
// module asked of it: the open takes it, whichever module created the pool entry (My Account
// and the console, which ask none, may be provisioned before the textgen handler that does).
var cacheSizes sync.Map // key -> *atomic.Int64

// askCache records that a module asks for a cache of n accounts of the directory key and
// returns the largest asked so far.
func askCache(key string, n int) *atomic.Int64 {
	v, _ := cacheSizes.LoadOrStore(key, new(atomic.Int64))
	c := v.(*atomic.Int64)
	for old := c.Load(); int64(n) > old && !c.CompareAndSwap(old, int64(n)); old = c.Load() {
	}
	return c
}

// AcquireLedger joins the ledger spec names (a directory or a database URL), opening it unless
// it is open, outside of a config's start (tests, tools). Release the Ref exactly once.
func AcquireLedger(dir string, opts badgerledger.Options) (*LedgerRef, error) {
	ref, err := newLedgerRef(dir, opts)
	if err != nil {
		return nil, err
	}
	if err := ref.Open(); err != nil {
		_ = ref.Release()
		return nil, err
	}
	return ref, nil
}

// OpenLedgers returns the ledgers open in this process, keyed by their absolute directory. The
// admin API reaches the ledger this way, so it works whatever config opened it.
func OpenLedgers() map[string]ledger.Store {
	out := map[string]ledger.Store{}
	ledgers.Range(func(k, v any) bool {
		if p, ok := v.(*pooled[ledger.Store]); ok {
			if s, err := p.get(); err == nil {
				out[k.(string)] = s
			}
		}
		return true
	})
	return out
}

func init() { caddy.OnExit(closeLedgersAtExit) }

// exitWait bounds how long the process's exit waits for the last shares of its ledgers.
var exitWait = 10 * time.Second

// closeLedgersAtExit runs when Caddy exits, after the last config's modules were cleaned up.
// A module whose work outlives its requests (the kept text's flusher writing a generation's
// end) gives its share of a ledger back when that work ends, from a goroutine of its own, and
// Caddy's exit does not wait for it: the process would end with the ledger open. Nothing would
// be lost (every commit is synced), but the kept text's last write would be, and the next start
// would have Badger's log to replay, which it cannot do on a full disk. So the exit waits for
// those shares, up to exitWait, and then closes whatever is still open.
func closeLedgersAtExit(context.Context) {
	left := func() (ps []*pooled[ledger.Store]) {
		alive.Range(func(k, _ any) bool {
			if p, ok := k.(*pooled[ledger.Store]); ok {
				ps = append(ps, p)
			}
			return true
		})
		return ps
	}
	for deadline := time.Now().Add(exitWait); len(left()) > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	for _, p := range left() {
		if err := p.Destruct(); err != nil {
			p.log.Error("closing the ledger at exit", zap.String("ledger", p.name), zap.Error(err))
		}
	}
}
