package textgenapp

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// TestLedgerOpenedOnlyByOpen: a share taken the way Provision takes it opens nothing (so
// `caddy validate` never locks a running server's directory); Open does, once for all shares;
// the last Release closes it.
func TestLedgerOpenedOnlyByOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ledger")
	opts := badgerledger.Options{DisableSyncWrites: true}
	a, err := newLedgerRef(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("before Open: %v, want ErrNotOpen", err)
	}
	if _, ok := OpenLedgers()[a.Key()]; ok {
		t.Fatal("an unopened ledger is listed as open")
	}
	// Provisioned but never started (caddy validate): releasing opens nothing either, and the
	// directory can be opened by someone else meanwhile.
	other, err := badgerledger.Open(dir, opts)
	if err != nil {
		t.Fatalf("a provisioned share locked the directory: %v", err)
	}
	other.Close()

	b, err := newLedgerRef(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Open(); err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatalf("second Open of a shared ledger: %v", err)
	}
	sa, _ := a.Get()
	sb, _ := b.Get()
	if sa == nil || sa != sb {
		t.Fatalf("shares see different stores: %p %p", sa, sb)
	}
	if OpenLedgers()[a.Key()] != sa {
		t.Fatal("the open ledger is not listed")
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(); err != nil { // a second release is a no-op
		t.Fatal(err)
	}
	if _, err := sa.Balance(context.Background(), "acct_none"); errors.Is(err, ledger.ErrClosed) {
		t.Fatal("the ledger closed while a share was still held")
	}
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Balance(context.Background(), "acct_none"); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("after the last release: %v, want ErrClosed", err)
	}
	if _, ok := OpenLedgers()[a.Key()]; ok {
		t.Fatal("a closed ledger is listed")
	}
}

// TestFailedOpenIsRetried: an open that fails (the directory is locked by another process) is
// not remembered: the next Start tries again.
func TestFailedOpenIsRetried(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ledger")
	opts := badgerledger.Options{DisableSyncWrites: true}
	holder, err := badgerledger.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	app := &App{}
	ref, err := app.Ledger(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	started := false
	app.OnStart(func() error { started = true; return nil })
	if err := app.Start(); err == nil {
		t.Fatal("Start opened a ledger another store holds")
	}
	if started {
		t.Fatal("a hook after a failed open ran")
	}
	holder.Close()
	if err := app.Start(); err != nil {
		t.Fatalf("Start after the directory was freed: %v", err)
	}
	if !started {
		t.Fatal("the start hook did not run")
	}
	if _, err := ref.Get(); err != nil {
		t.Fatal(err)
	}
}

// TestUnreachableAtStartIsRetried: a resource whose open fails with a retryable error (a
// database not reachable yet) does not fail the config's start: it is "not open yet" (the
// handlers answer 503) until a background retry opens it. Releasing the last share stops the
// retries. (The open function stands in for the database: what is tested is the pool's logic.)
// It runs on virtual time (testing/synctest) with the real retryEvery: each Sleep is one
// interval of the ticker, and synctest.Wait lets the retry finish before the counts are read.
func TestUnreachableAtStartIsRetried(t *testing.T) {
	synctest.Test(t, testUnreachableAtStartIsRetried)
}

func testUnreachableAtStartIsRetried(t *testing.T) {
	down := errors.New("connection refused")
	var attempts atomic.Int64
	var up atomic.Bool
	open := func() (string, error) {
		attempts.Add(1)
		if !up.Load() {
			return "", down
		}
		return "db", nil
	}
	// tick lets intervals of the retries pass and returns the attempts made so far.
	tick := func(intervals int) int64 {
		time.Sleep(time.Duration(intervals) * retryEvery)
		synctest.Wait()
		return attempts.Load()
	}
	ref, err := acquire(ledgers, "retry-test", open, func(string) error { return nil },
		func(err error) bool { return errors.Is(err, down) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.Open(); err != nil {
		t.Fatalf("start with the resource unreachable: %v, want it to start anyway", err)
	}
	if _, err := ref.Get(); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("while unreachable: %v, want ErrNotOpen", err)
	}
	for want := int64(2); want <= 3; want++ {
		if n := tick(1); n != want {
			t.Fatalf("%d attempts after %d intervals, want one at the start and one per interval", n, want-1)
		}
		if _, err := ref.Get(); !errors.Is(err, ErrNotOpen) {
			t.Fatalf("while unreachable: %v, want ErrNotOpen", err)
		}
	}
	up.Store(true)
	tick(1)
	if v, err := ref.Get(); err != nil || v != "db" {
		t.Fatalf("one interval after the resource came up: %q, %v; want it open", v, err)
	}
	if n := tick(10); n != 4 {
		t.Fatalf("%d attempts; the retries did not stop once it opened", n)
	}
	if err := ref.Release(); err != nil {
		t.Fatal(err)
	}

	// A resource still unreachable when its last share goes: the retries stop.
	up.Store(false)
	ref, _ = acquire(ledgers, "retry-test-2", open, func(string) error { return nil },
		func(err error) bool { return errors.Is(err, down) }, nil)
	if err := ref.Open(); err != nil {
		t.Fatal(err)
	}
	ref.Release()
	n := attempts.Load()
	if more := tick(10) - n; more != 0 {
		t.Fatalf("%d more attempts after the last share was released", more)
	}
	// A failure that is not retryable fails the start.
	ref, _ = acquire(ledgers, "retry-test-3", func() (string, error) { return "", errors.New("bad url") },
		func(string) error { return nil }, func(err error) bool { return errors.Is(err, down) }, nil)
	defer ref.Release()
	if err := ref.Open(); err == nil {
		t.Fatal("a failure that is not retryable did not fail the start")
	}
}
