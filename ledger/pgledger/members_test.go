package pgledger

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// Organisations on two instances of one PostgreSQL database: a member removed through one is
// refused by the other on its very next lookup, and one member's cap holds across both.

func TestPostgresInstancesMembers(t *testing.T) {
	a, b := twoInstances(t, pgQuiet)
	alice, bob, _ := ledgertest.Org(t, a, ledger.RoleMember)
	ledgertest.MustGrant(t, a, alice.ID, ledger.Live, 100)
	full, bk, err := b.CreateMemberKey(bg, alice.ID, bob.ID, ledger.Live, "bob's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.LookupKey(bg, full); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetMemberCap(bg, alice.ID, bob.ID, 9); err != nil {
		t.Fatal(err)
	}
	var ok, capped atomic.Int64
	var wg sync.WaitGroup
	for i := range 100 {
		s := []*Postgres{a, b}[i%2]
		wg.Go(func() {
			_, err := s.Hold(bg, ledger.HoldRequest{AccountID: alice.ID, Mode: ledger.Live, RequestID: fmt.Sprint("r", i), KeyID: bk.ID})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ledger.ErrMemberCapReached):
				capped.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 9 || capped.Load() != 91 {
		t.Fatalf("%d holds through and %d capped on two instances; want 9 and 91", ok.Load(), capped.Load())
	}
	if _, err := a.RemoveMember(bg, alice.ID, bob.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.LookupKey(bg, full); !errors.Is(err, ledger.ErrInvalidKey) {
		t.Fatalf("bob's key on the other instance after his removal: %v", err)
	}
	ledgertest.VerifyClean(t, b)
}
