package textgenapp

import (
	"fmt"

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

// ledgerKey is the pool key of the ledger named in a config: its absolute directory.
func ledgerKey(dir string) (string, error) {
	abs, err := caddy.FastAbs(dir)
	if err != nil {
		return "", fmt.Errorf("ledger directory %q: %w", dir, err)
	}
	return abs, nil
}

// newLedgerRef joins (or creates, unopened) the ledger in dir. Options count when this call
// creates the pool entry; every hold carries its own handler's TTL anyway.
func newLedgerRef(dir string, opts ledger.Options) (*LedgerRef, error) {
	key, err := ledgerKey(dir)
	if err != nil {
		return nil, err
	}
	return acquire(ledgers, key,
		func() (ledger.Store, error) {
			db, err := ledger.Open(key, opts)
			if err != nil {
				return nil, fmt.Errorf("opening ledger %s: %w", key, err)
			}
			return db, nil
		},
		func(s ledger.Store) error { return s.Close() })
}

// AcquireLedger joins the ledger in dir, opening it unless it is open, outside of a config's
// start (tests, tools). Release the Ref exactly once.
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
