package badgerledger

import (
	"errors"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// Tests of the Badger engine's own machinery: its options, background loops and failure mode.

func TestBackgroundSweep(t *testing.T) {
	// The real ticker with a tiny TTL; it only waits for the sweep, it asserts no timing.
	s, err := Open("", Options{InMemory: true, HoldTTL: time.Millisecond, SweepInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := ledgertest.MustAccount(t, s, "bg@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, 1)
	ledgertest.MustHold(t, s, a, ledger.Live, "r")
	deadline := time.Now().Add(time.Minute)
	for ledgertest.MustBalance(t, s, a).Available != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the background sweep never voided the hold")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ledgertest.VerifyClean(t, s)
}

func TestFailedCommitStopsTheStore(t *testing.T) {
	s := newMem(t)
	a := ledgertest.MustAccount(t, s, "f@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, 1)
	boom := errors.New("disk on fire")
	s.c.mu.Lock()
	s.c.failed = boom
	s.c.mu.Unlock()
	_, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "r"})
	ledgertest.WantErr(t, err, boom)
	_, err = s.Balance(bg, a)
	ledgertest.WantErr(t, err, boom)
	_, err = s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1})
	ledgertest.WantErr(t, err, boom)
}

func TestOpenArguments(t *testing.T) {
	if _, err := Open("", Options{}); err == nil {
		t.Fatal("Open without a directory succeeded")
	}
	if _, err := Open(t.TempDir(), Options{InMemory: true}); err == nil {
		t.Fatal("Open with a directory and InMemory succeeded")
	}
	if _, err := Open(t.TempDir(), Options{HoldTTL: -time.Second}); err == nil {
		t.Fatal("Open with a negative HoldTTL succeeded")
	}
}

// TestSyncWritesByDefault: a zero Options syncs every commit (a kill cannot show a missing
// fsync, the page cache survives it; a power loss would).
func TestSyncWritesByDefault(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if !badgerOptions(t.TempDir(), o).SyncWrites {
		t.Fatal("the default options do not sync writes")
	}
	if badgerOptions(t.TempDir(), Options{DisableSyncWrites: true, Logger: o.Logger}).SyncWrites {
		t.Fatal("DisableSyncWrites did not turn syncing off")
	}
}
