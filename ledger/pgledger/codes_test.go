package pgledger

import (
	"fmt"
	"sync"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// TestPostgresInstancesRedeem: 50 accounts redeem a 10-use code at once over two instances
// sharing one database: exactly 10 are credited. Then one account redeems another code 30
// times at once over both instances: once.
func TestPostgresInstancesRedeem(t *testing.T) {
	a, b := twoInstances(t, pgQuiet)
	var accts []string
	for i := range 50 {
		accts = append(accts, ledgertest.MustAccount(t, a, fmt.Sprintf("r%d@example.com", i)).ID)
	}
	code, c := ledgertest.MustCode(t, b, ledger.NewCode{Credits: 4, MaxUses: 10})
	ledgertest.CheckRedeemedExactly(t, []ledger.Store{a, b}, code, c.ID, accts, 4, 10)

	code2, c2 := ledgertest.MustCode(t, a, ledger.NewCode{Credits: 2, MaxUses: 50})
	var wg sync.WaitGroup
	var mu sync.Mutex
	credited := 0
	for i := range 30 {
		s := []*Postgres{a, b}[i%2]
		wg.Go(func() {
			_, err := s.Redeem(bg, accts[0], code2)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				credited++
			case !ledgertest.IsAlreadyRedeemed(err):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if credited != 1 {
		t.Fatalf("one account redeemed one code %d times over two instances, want once", credited)
	}
	if got, err := b.GetCode(bg, c2.ID); err != nil || got.Uses != 1 {
		t.Fatalf("code %+v %v", got, err)
	}
	if bal := ledgertest.MustBalance(t, b, accts[0]); bal.Balance != 4+2 && bal.Balance != 2 {
		t.Fatalf("balance %+v", bal)
	}
	ledgertest.VerifyClean(t, a)
}
