//go:build !windows && !plan9 && !js && !wasip1

package ledger

import (
	"errors"
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
