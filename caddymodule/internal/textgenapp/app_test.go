package textgenapp

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestLedgerOpenedOnlyByOpen: a share taken the way Provision takes it opens nothing (so
// `caddy validate` never locks a running server's directory); Open does, once for all shares;
// the last Release closes it.
func TestLedgerOpenedOnlyByOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ledger")
	opts := ledger.Options{DisableSyncWrites: true}
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
	other, err := ledger.Open(dir, opts)
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
	opts := ledger.Options{DisableSyncWrites: true}
	holder, err := ledger.Open(dir, opts)
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
