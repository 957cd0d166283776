package ledger

import (
	"testing"
)

// quiet disables the background loops so tests drive sweeps and flushes themselves.
var quiet = Options{SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1}

func newMem(t testing.TB) *Badger {
	t.Helper()
	o := quiet
	o.InMemory = true
	s, err := Open("", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openDir(t testing.TB, dir string, o Options) *Badger {
	t.Helper()
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
