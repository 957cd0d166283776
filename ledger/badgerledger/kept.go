package badgerledger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The kept generations of the Badger engine live in a second Badger directory inside the
// ledger's, keptDirName, opened without synced writes: kept text is ciphertext that matters for
// minutes, not money, so its writes must not ride in the money's synced group commits (where
// they cost a fifth of the throughput at 64 clients) nor pay a disk sync of their own. A write
// that returned is in the operating system's page cache, so a killed process loses none of it;
// a power cut may lose the last seconds of kept text (never a credit: the ledger's own writes
// stay synced). The directory is opened on first use, so a ledger opened on a nearly full disk
// starts without it, and it is never backed up, exported or verified: it holds nothing that
// the ledger's records depend on.

// keptDirName is the kept generations' directory inside the ledger's.
const keptDirName = "generations"

// keptValueThreshold is the kept store's value threshold: every record and chunk is larger.
// (A variable for BenchmarkKeptCPU, which compares it with values kept in the tables.)
var keptValueThreshold int64 = 64

// keptStore is the kept generations' Badger, opened on first use.
type keptStore struct {
	mu     sync.Mutex
	db     *badger.DB
	opts   badger.Options
	log    *zap.Logger
	locked bool // the ledger's directory lock is held (lockDir), so its files are this process's
	closed bool
}

func newKeptStore(dir string, o Options, bypassLock bool) *keptStore {
	o.Logger = o.Logger.Named("generations")
	bo := badgerOptions(filepath.Join(dir, keptDirName), o)
	if !o.InMemory {
		// The records and the text go to the value log, appended once; the tables hold their
		// keys and pointers. Inline, every byte of text was copied again by each memtable flush
		// and compaction: about twice the CPU a kept generation (BenchmarkKeptCPU compares the
		// two). The value log's files are reclaimed by runGC once the window has passed over
		// them (TestKeptTextSpaceIsReclaimed). (An in-memory Badger has no value log: it
		// refuses values above the threshold.)
		bo = bo.WithSyncWrites(false).WithValueThreshold(keptValueThreshold)
	}
	bo = bo.
		WithNumMemtables(2).
		WithBlockCacheSize(1 << 20).
		WithNumGoroutines(1).
		WithValueLogFileSize(16 << 20).
		// Ciphertext does not compress: compressing its tables would only cost CPU.
		WithCompression(options.None).
		WithBypassLockGuard(bypassLock)
	return &keptStore{opts: bo, log: o.Logger, locked: bypassLock}
}

// get returns the open kept store, opening it first if needed. A directory Badger cannot open
// (a crash on a disk that lost its page cache, say) holds only kept text: it is set aside and a
// new one made, since no kept text is worth refusing the generations that follow.
func (k *keptStore) get() (*badger.DB, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, ledger.ErrClosed
	}
	if k.db != nil {
		return k.db, nil
	}
	if !k.opts.InMemory {
		if err := os.MkdirAll(k.opts.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("opening the kept generations: %w", err)
		}
		// The same Badger bug the ledger's own directory is guarded against (repair.go).
		if err := removeEmptyLogs(k.opts.Dir, k.log, k.locked); err != nil {
			return nil, fmt.Errorf("opening the kept generations: %w", err)
		}
	}
	db, err := badger.Open(k.opts)
	if err != nil && !k.opts.InMemory {
		k.log.Error("the kept generations' directory does not open; it is removed and made anew (its text is lost, no credit is)",
			zap.String("dir", k.opts.Dir), zap.Error(err))
		if rerr := os.RemoveAll(k.opts.Dir); rerr != nil {
			return nil, fmt.Errorf("opening the kept generations: %w (and removing it: %v)", err, rerr)
		}
		db, err = badger.Open(k.opts)
	}
	if err != nil {
		return nil, fmt.Errorf("opening the kept generations: %w", err)
	}
	k.db = db
	return db, nil
}

// opened returns the kept store if it is open, else nil: readers of a store that was never
// written have nothing to read.
func (k *keptStore) opened() *badger.DB {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.db
}

// close closes the kept store. With the disk nearly full it is left as a crash leaves it (its
// Close writes a table through a memory map, which a full disk answers with SIGBUS).
func (k *keptStore) close(diskFull error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	if k.db == nil {
		return nil
	}
	if diskFull != nil {
		return nil
	}
	return k.db.Close()
}

// runGC rewrites the kept store's value logs once most of them has expired.
func (k *keptStore) runGC() {
	db := k.opened()
	if db == nil || k.opts.InMemory {
		return
	}
	for {
		err := db.RunValueLogGC(0.5)
		if err == nil {
			continue
		}
		if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
			k.log.Warn("kept generations: value log GC failed", zap.Error(err))
		}
		return
	}
}

// dropLegacyGenerations deletes kept generations that an earlier version wrote into the
// ledger's own directory (they expire by Badger's TTL anyway; this frees them at once).
func (s *Badger) dropLegacyGenerations(ctx context.Context) error {
	var ws []write
	err := s.db.View(func(txn *badger.Txn) error {
		for _, p := range []byte{prefixGeneration, prefixGenChunk} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{p}})
			for it.Rewind(); it.Valid() && len(ws) < maxBatchOps; it.Next() {
				ws = append(ws, del(it.Item().KeyCopy(nil)))
			}
			it.Close()
		}
		return ctx.Err()
	})
	if err != nil || len(ws) == 0 {
		return err
	}
	if err := s.c.enqueue(ws).wait(); err != nil {
		return err
	}
	return s.dropLegacyGenerations(ctx)
}
