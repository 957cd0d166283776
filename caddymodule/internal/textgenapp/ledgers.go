package textgenapp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/ledger"
)

// Caddy provisions a new config before it stops the old one, and Badger locks its directory, so
// a ledger is opened once per directory and shared through a usage pool: a reload joins the open
// database, and the last module to let go closes it. The pool (not a config context) owns the
// database's goroutines, so they live exactly as long as the database.
var ledgers = caddy.NewUsagePool()

// LedgerRef is a module's share of a pooled ledger.
type LedgerRef = Ref[ledger.Store]

// IsDatabaseURL reports a ledger value that names a PostgreSQL database (postgres:// or
// postgresql://) rather than a Badger directory.
func IsDatabaseURL(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
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
// handler's TTL anyway. A database that cannot be reached at start does not fail the config:
// requests get 503 ledger_unavailable until it can, and the open is retried.
func newLedgerRef(spec string, opts ledger.Options) (*LedgerRef, error) {
	key, err := LedgerKey(spec)
	if err != nil {
		return nil, err
	}
	if IsDatabaseURL(spec) {
		popts := ledger.PostgresOptions{HoldTTL: opts.HoldTTL, Logger: opts.Logger}
		// Holds of an instance that died are voided by the others' sweeps: sweep a few times
		// per hold TTL, so a hold outlives its TTL by a quarter of it at most.
		if ttl := cmp.Or(opts.HoldTTL, ledger.DefaultHoldTTL); ttl/4 < ledger.DefaultSweepInterval {
			popts.SweepInterval = ttl / 4
		}
		return acquire(ledgers, key,
			func() (ledger.Store, error) {
				ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
				defer cancel()
				db, err := ledger.OpenPostgres(ctx, spec, popts)
				if err != nil {
					return nil, fmt.Errorf("opening ledger %s: %w", key, err)
				}
				return db, nil
			},
			func(s ledger.Store) error { return s.Close() },
			func(err error) bool { return errors.Is(err, ledger.ErrUnavailable) }, opts.Logger)
	}
	return acquire(ledgers, key,
		func() (ledger.Store, error) {
			db, err := ledger.Open(key, opts)
			if err != nil {
				return nil, fmt.Errorf("opening ledger %s: %w", key, err)
			}
			return db, nil
		},
		func(s ledger.Store) error { return s.Close() }, nil, nil)
}

// AcquireLedger joins the ledger spec names (a directory or a database URL), opening it unless
// it is open, outside of a config's start (tests, tools). Release the Ref exactly once.
func AcquireLedger(dir string, opts ledger.Options) (*LedgerRef, error) {
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
