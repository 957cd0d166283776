package ledger

import (
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// TestConformance runs the conformance suite on Badger: on disk (a real, synced directory, as
// in production) and in memory (what unit tests of other packages use), and on PostgreSQL
// (postgres_conformance_test.go).
func TestConformance(t *testing.T) {
	t.Run("disk", func(t *testing.T) {
		runConformance(t, badgerEngine(func(t *testing.T, o Options) *Badger {
			return openDir(t, t.TempDir(), o)
		}))
	})
	t.Run("memory", func(t *testing.T) {
		runConformance(t, badgerEngine(func(t *testing.T, o Options) *Badger {
			o.InMemory = true
			return openDir(t, "", o)
		}))
	})
	t.Run("postgres", func(t *testing.T) { runConformance(t, postgresEngine()) })
}

// badgerEngine describes Badger to the conformance suite; open opens a store with o.
func badgerEngine(open func(t *testing.T, o Options) *Badger) engine {
	return engine{
		open: func(t *testing.T, holdTTL time.Duration) Store {
			o := quiet // no background sweep: the suite calls expire
			o.HoldTTL = holdTTL
			return open(t, o)
		},
		expire: func(t *testing.T, s Store) (int, error) { return s.(*Badger).sweep() },
		stored: func(t *testing.T, s Store) [][]byte {
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
