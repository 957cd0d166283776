package textgenapp

import (
	"path/filepath"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// TestRegistryNewestAnswers: during a reload two configs' modules are registered for one
// ledger; the newest answers, withdrawing either leaves the other, a second withdrawal changes
// nothing, and another ledger sees none of them.
func TestRegistryNewestAnswers(t *testing.T) {
	open := func(name string) ledger.Store {
		s, err := badgerledger.Open(filepath.Join(t.TempDir(), name), badgerledger.Options{DisableSyncWrites: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open("a"), open("b")
	var r registry[string]
	if got := r.newest(a); got != "" {
		t.Fatalf("nothing registered, got %q", got)
	}
	withdrawOld := r.register(a, "old")
	withdrawNew := r.register(a, "new")
	withdrawSame := r.register(a, "new") // an equal value registered again is a registration of its own
	if got := r.newest(a); got != "new" {
		t.Fatalf("newest = %q, want new", got)
	}
	if got := r.newest(b); got != "" {
		t.Fatalf("another ledger's newest = %q, want none", got)
	}
	withdrawSame()
	if got := r.newest(a); got != "new" {
		t.Fatalf("after the equal value's withdrawal: %q, want the first new", got)
	}
	withdrawNew()
	withdrawNew()
	if got := r.newest(a); got != "old" {
		t.Fatalf("after the new one's withdrawal: %q, want old", got)
	}
	withdrawOld()
	if got := r.newest(a); got != "" {
		t.Fatalf("after every withdrawal: %q, want none", got)
	}
	if len(r.byLS) != 0 {
		t.Fatalf("%d ledgers still held after every withdrawal", len(r.byLS))
	}
}
