//go:build windows || plan9 || js || wasip1

package badgerledger

// withDirLock skips fn where Badger does not lock with flock: without taking Badger's own lock,
// removing files could race with a process that has the ledger open. On these platforms an
// empty log file left by a crash must be removed by hand (see repair.go).
func withDirLock(dir string, fn func() error) error { return nil }

// lockDir leaves the directory lock to Badger here (it does not use flock on these platforms).
func lockDir(string) (func(), bool, error) { return func() {}, false, nil }
