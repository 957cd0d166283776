package textgenapp

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// TestLedgerPlacement: what the callers are told before a ledger opens is what its engine says:
// a Badger directory is this instance's, its files in that directory (absolute), as the open
// store states it too; a PostgreSQL URL, also one given as a placeholder, is shared and has no
// files here.
func TestLedgerPlacement(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ledger")
	got, err := LedgerPlacement(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ledger.Placement{Dir: dir}); got != want {
		t.Fatalf("Badger before it opens: %+v, want %+v", got, want)
	}
	ref, err := AcquireLedger(dir, badgerledger.Options{DisableSyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ref.Release() })
	s, err := ref.Get()
	if err != nil {
		t.Fatal(err)
	}
	if s.Placement() != got {
		t.Fatalf("the open Badger ledger states %+v, before it opened %+v", s.Placement(), got)
	}

	t.Setenv("TEXTGEN_TEST_LEDGER_URL", "postgres://textgen:secret@db.invalid/ledger")
	for _, spec := range []string{"postgres://textgen@db.invalid/ledger", "{env.TEXTGEN_TEST_LEDGER_URL}"} {
		got, err := LedgerPlacement(spec)
		if err != nil {
			t.Fatal(err)
		}
		if want := (ledger.Placement{Shared: true}); got != want {
			t.Errorf("%s: %+v, want %+v", spec, got, want)
		}
	}
}

// The account cache of a Badger ledger is the largest any module asked before it opened, not the
// first module's: My Account, which asks none, may create the pool entry before the textgen
// handler that sets ledger_cache_accounts.
func TestLedgerCacheLargestAsked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ledger")
	first, err := newLedgerRef(dir, badgerledger.Options{DisableSyncWrites: true}) // the default
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Release() })
	second, err := newLedgerRef(dir, badgerledger.Options{DisableSyncWrites: true, CacheAccounts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Release() })
	if err := first.Open(); err != nil {
		t.Fatal(err)
	}
	s, err := second.Get()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 6 {
		a, err := s.CreateAccount(ctx, fmt.Sprintf("cache%d@example.com", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Balance(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
	}
	st := s.(*badgerledger.Badger).CacheStats()
	if st.Evictions == 0 || st.Accounts > 2 {
		t.Fatalf("asked for a cache of 2 after a module that asked none: %d accounts cached, %d evictions", st.Accounts, st.Evictions)
	}
}
