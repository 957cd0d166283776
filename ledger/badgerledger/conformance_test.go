package badgerledger

import (
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// TestConformance runs the conformance suite on Badger: on disk (a real, synced directory, as
// in production), in memory (what unit tests of other packages use), and on disk with a cache of
// one account, so that every account is let go and read again between the suite's calls (a
// revocation, a roll, a budget, a hold must survive that as they survive nothing).
func TestConformance(t *testing.T) {
	t.Run("disk", func(t *testing.T) {
		ledgertest.Run(t, badgerEngine(func(t *testing.T, o Options) *Badger {
			return openDir(t, t.TempDir(), o)
		}))
	})
	t.Run("cache=1", func(t *testing.T) {
		ledgertest.Run(t, badgerEngine(func(t *testing.T, o Options) *Badger {
			o.CacheAccounts = 1
			return openDir(t, t.TempDir(), o)
		}))
	})
	t.Run("memory", func(t *testing.T) {
		ledgertest.Run(t, badgerEngine(func(t *testing.T, o Options) *Badger {
			o.InMemory = true
			return openDir(t, "", o)
		}))
	})
}

// badgerEngine describes Badger to the conformance suite; open opens a store with o.
func badgerEngine(open func(t *testing.T, o Options) *Badger) ledgertest.Engine {
	return ledgertest.Engine{
		Open: func(t *testing.T, lo ledgertest.Options) ledger.Store {
			o := quiet // no background sweep: the suite calls Expire
			o.HoldTTL, o.Now = lo.HoldTTL, lo.Now
			return open(t, o)
		},
		Expire: func(t *testing.T, s ledger.Store) (int, error) { return s.(*Badger).sweep() },
		Stored: func(t *testing.T, s ledger.Store) [][]byte {
			t.Helper()
			var out [][]byte
			err := s.(*Badger).db.View(func(txn *badger.Txn) error {
				return iterate(txn, nil, func(k, v []byte) error {
					out = append(out, k, v)
					return nil
				})
			})
			if err != nil {
				t.Fatal(err)
			}
			return out
		},
	}
}
