package textgenapp

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// TestExitWaitsForLastShare: when Caddy exits, a ledger whose last share is still held by work
// that outlives its requests (the kept text's flusher) is closed only when that work has given
// it back, so its last write lands and Badger writes its memtable out (no log is left to replay);
// a share never given back is closed after exitWait anyway.
func TestExitWaitsForLastShare(t *testing.T) {
	bg := context.Background()
	dir := filepath.Join(t.TempDir(), "ledger")
	ref, err := AcquireLedger(dir, badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, _ := ref.Get()
	acct, err := store.CreateAccount(bg, "exit@example.com")
	if err != nil {
		t.Fatal(err)
	}
	// The late work: a write a while after the exit began, then the release.
	wrote := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		_, err := store.Grant(bg, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 3, Reference: "late"})
		wrote <- err
		ref.Release()
	}()
	closeLedgersAtExit(bg)
	if err := <-wrote; err != nil {
		t.Fatalf("the late write failed: %v (the exit closed the ledger under it)", err)
	}
	if _, err := store.Balance(bg, acct.ID); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("after the exit: %v, want the ledger closed", err)
	}
	checkNoLog(t, dir)

	// A share nobody gives back: closed after exitWait.
	old := exitWait
	exitWait = 50 * time.Millisecond
	t.Cleanup(func() { exitWait = old })
	stuck, err := AcquireLedger(dir, badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Release() // after the exit closed it: a no-op
	store, _ = stuck.Get()
	b, err := store.Balance(bg, acct.ID)
	if err != nil || b.Balance != 3 {
		t.Fatalf("balance after reopening: %+v %v, want the late grant's 3", b, err)
	}
	closeLedgersAtExit(bg)
	if _, err := store.Balance(bg, acct.ID); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("a share never released: %v after the exit, want the ledger closed", err)
	}
	checkNoLog(t, dir)
}

// checkNoLog fails when dir holds a Badger write-ahead log, which a clean close removes.
func checkNoLog(t *testing.T, dir string) {
	t.Helper()
	if logs, _ := filepath.Glob(filepath.Join(dir, "*.mem")); len(logs) > 0 {
		t.Fatalf("write-ahead logs left to replay: %v", logs)
	}
}
