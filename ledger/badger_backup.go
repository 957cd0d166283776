package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	badger "github.com/dgraph-io/badger/v4"
)

// Backup writes an online, consistent backup of the whole ledger to w (Badger's backup format,
// db.Backup since 0). Calls keep working while it runs. Restore reads it back.
func (s *Badger) Backup(ctx context.Context, w io.Writer) error {
	if err := s.flushLastUsed(true); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	if _, err := s.db.Backup(w, 0); err != nil {
		return fmt.Errorf("backing up ledger: %w", err)
	}
	return nil
}

// Restore loads a stream written by Backup into dir, which must be missing or empty; Open
// the directory afterwards. It refuses a non-empty directory so that it can never mix two
// ledgers.
func Restore(dir string, r io.Reader) error {
	if dir == "" {
		return fmt.Errorf("restoring ledger: no directory: %w", ErrInvalidArgument)
	}
	empty, err := dirEmpty(dir)
	if err != nil {
		return fmt.Errorf("restoring ledger: %w", err)
	}
	if !empty {
		return fmt.Errorf("restoring ledger: directory %q is not empty: %w", dir, ErrInvalidArgument)
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
