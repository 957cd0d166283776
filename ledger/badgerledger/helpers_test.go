package badgerledger

import (
	"context"
	"testing"
	"time"
)

var bg = context.Background()

// now is the clock of the stores these tests open without one of their own (setNow).
var now = time.Now

// setNow fixes the tests' clock to *at (read on every call) until the test ends. Set it only
// while no background loop of an open store can run.
func setNow(t testing.TB, at *time.Time) {
	t.Helper()
	old := now
	now = func() time.Time { return *at }
	t.Cleanup(func() { now = old })
}

// onTestClock gives o the tests' clock unless it has a clock of its own.
func onTestClock(o Options) Options {
	if o.Now == nil {
		o.Now = func() time.Time { return now() }
	}
	return o
}

// quiet disables the background loops so tests drive sweeps and flushes themselves, on the
// tests' clock.
var quiet = Options{SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1, Now: func() time.Time { return now() }}

func newMem(t testing.TB) *Badger {
	t.Helper()
	o := quiet
	o.InMemory = true
	s, err := Open("", onTestClock(o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openDir(t testing.TB, dir string, o Options) *Badger {
	t.Helper()
	s, err := Open(dir, onTestClock(o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
