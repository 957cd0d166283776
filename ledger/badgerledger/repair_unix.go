//go:build !windows && !plan9 && !js && !wasip1

package badgerledger

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// withDirLock runs fn holding an exclusive flock on dir, the lock Badger's Open takes
// (badger/dir_unix.go). flock locks belong to the open file description, so this conflicts with
// a Badger open in this process as well as in another one. If the lock is taken, fn is skipped.
func withDirLock(dir string, fn func() error) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil
		}
		return err
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return fn()
}

// lockDir takes the exclusive flock on dir that Badger's Open would take (the same lock, so it
// conflicts with any Badger open of dir, in this process or another one) and keeps it until
// unlock. The store holds it itself and opens Badger with its lock guard bypassed, because
// Badger's guard also writes a pid file, which fails on a full disk: the ledger must open there,
// to serve reads and to refuse writes cleanly.
func lockDir(dir string) (unlock func(), bypass bool, err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, fmt.Errorf("cannot acquire the directory lock on %q: another process is using this ledger", dir)
		}
		return nil, false, err
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, true, nil
}
