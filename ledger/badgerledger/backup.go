package badgerledger

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"google.golang.org/protobuf/proto"

	"github.com/caddy-textgen/textgen/ledger"
)

// Backup writes an online, consistent backup of the whole ledger to w, in Badger's backup
// format (what db.Backup writes and Restore's db.Load reads): the live version of every record,
// read from one snapshot. Calls keep working while it runs. Restore reads it back.
//
// It does not use db.Backup: Badger's stream reads ranges in parallel into 32 MiB buffers and
// queues up to 32 of them for the writer, and on a ledger of 5 million entries that took the
// process's memory 4 GB above the open ledger, in the server that serves requests. One iterator
// writing batches of backupBatch bytes keeps it at a few MiB, however large the ledger.
func (s *Badger) Backup(ctx context.Context, w io.Writer) error {
	if err := s.flushLastUsed(true); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.life.End()
	// Everything a call made before the backup, writes still queued for a commit included.
	if err := s.c.barrier(); err != nil {
		return err
	}
	if err := s.db.View(func(txn *badger.Txn) error { return writeBackup(ctx, txn, w) }); err != nil {
		return fmt.Errorf("backing up ledger: %w", err)
	}
	return nil
}

// backupBatch is about how many bytes of records one KVList of a backup holds.
const backupBatch = 1 << 20

// writeBackup writes every live record txn sees to w as Badger's backup format: KVLists, each
// preceded by its length (uint64, little-endian). Deleted and expired records are left out, as
// a full backup (db.Backup since 0) restored into an empty directory never needs them.
func writeBackup(ctx context.Context, txn *badger.Txn, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	list := &pb.KVList{}
	size := 0
	var buf []byte
	flush := func() error {
		if len(list.Kv) == 0 {
			return nil
		}
		var err error
		buf, err = proto.MarshalOptions{}.MarshalAppend(buf[:0], list)
		if err != nil {
			return err
		}
		if err := binary.Write(bw, binary.LittleEndian, uint64(len(buf))); err != nil {
			return err
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		list.Kv, size = list.Kv[:0], 0
		return nil
	}
	n := 0
	for it.Rewind(); it.Valid(); it.Next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		item := it.Item()
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		list.Kv = append(list.Kv, &pb.KV{
			Key:       item.KeyCopy(nil),
			Value:     v,
			UserMeta:  []byte{item.UserMeta()},
			Version:   item.Version(),
			ExpiresAt: item.ExpiresAt(),
		})
		if size += len(item.Key()) + len(v) + 32; size >= backupBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	return bw.Flush()
}

// Restore loads a stream written by Backup into dir, which must be missing or empty; Open
// the directory afterwards. It refuses a non-empty directory so that it can never mix two
// ledgers.
func Restore(dir string, r io.Reader) error {
	if dir == "" {
		return fmt.Errorf("restoring ledger: no directory: %w", ledger.ErrInvalidArgument)
	}
	empty, err := dirEmpty(dir)
	if err != nil {
		return fmt.Errorf("restoring ledger: %w", err)
	}
	if !empty {
		return fmt.Errorf("restoring ledger: directory %q is not empty: %w", dir, ledger.ErrInvalidArgument)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("restoring ledger: %w", err)
	}
	opts, _ := Options{}.withDefaults()
	db, err := badger.Open(badgerOptions(dir, opts))
	if err != nil {
		return fmt.Errorf("restoring ledger into %q: %w", dir, err)
	}
	err = db.Load(r, 256)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("restoring ledger into %q: %w", dir, err)
	}
	return nil
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
