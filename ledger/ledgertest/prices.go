package ledgertest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Holds with a price (HoldRequest.Credits): a hold reserves the request's price, a settle
// charges it, a void gives it back, and everything that counts credits counts it.

// holdPriced holds price credits of acct's live balance for rid, on key kid (may be empty).
func holdPriced(s ledger.Store, acct, kid, rid string, price int64) (ledger.HoldResult, error) {
	return s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: rid, KeyID: kid, Tool: "bewerbung", Credits: price})
}

func testHoldPrice(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "price@example.com").ID
	MustGrant(t, s, a, ledger.Live, 5)

	r, err := holdPriced(s, a, "", "r1", 3)
	if err != nil || r.Available != 2 || r.Credits != 3 || r.State != ledger.HoldOpen {
		t.Fatalf("hold of 3 on 5: %+v %v", r, err)
	}
	// A repeated hold reports the first hold's price, whatever the second call names: the price
	// charged is the one in force when the credit was held.
	if r, err := holdPriced(s, a, "", "r1", 1); err != nil || !r.Repeated || r.Credits != 3 || r.Available != 2 {
		t.Fatalf("repeated hold: %+v %v", r, err)
	}
	// More than what is available is refused and writes nothing.
	before := AllHistory(t, s, a)
	_, err = holdPriced(s, a, "", "r2", 3)
	WantErr(t, err, ledger.ErrInsufficientCredits)
	if after := AllHistory(t, s, a); len(after) != len(before) {
		t.Fatalf("a refused hold wrote %d entries", len(after)-len(before))
	}
	// Exactly what is available is not refused.
	if r, err := holdPriced(s, a, "", "r3", 2); err != nil || r.Available != 0 || r.Credits != 2 {
		t.Fatalf("hold of 2 on 2: %+v %v", r, err)
	}
	if h, err := s.GetHold(bg, a, "r1"); err != nil || h.Credits != 3 {
		t.Fatalf("GetHold: %+v %v", h, err)
	}
	// The settle charges the price; the void gives it back.
	if r, err := s.Settle(bg, a, "r1"); err != nil || r.Credits != 3 || r.Available != 0 {
		t.Fatalf("settle: %+v %v", r, err)
	}
	if r, err := s.Void(bg, a, "r3", "backend_error"); err != nil || r.Credits != 2 || r.Available != 2 {
		t.Fatalf("void: %+v %v", r, err)
	}
	if b := MustBalance(t, s, a); b.Balance != 2 || b.Available != 2 {
		t.Fatalf("balance: %+v", b)
	}
	// The entries say what each hold reserved and what the settle charged.
	h := AllHistory(t, s, a) // newest first: void r3, settle r1, hold r3, hold r1, grant
	if len(h) != 5 || h[0].Kind != ledger.KindVoid || h[0].Credits != 2 || h[0].Amount != 0 ||
		h[1].Kind != ledger.KindSettle || h[1].Credits != 3 || h[1].Amount != -3 ||
		h[2].Kind != ledger.KindHold || h[2].Credits != 2 || h[2].AvailableAfter != 0 ||
		h[3].Kind != ledger.KindHold || h[3].Credits != 3 || h[3].AvailableAfter != 2 {
		t.Fatalf("history: %+v", h)
	}
	// A hold that names no price reserves one credit.
	if r, err := holdPriced(s, a, "", "r4", 0); err != nil || r.Credits != 1 || r.Available != 1 {
		t.Fatalf("hold without a price: %+v %v", r, err)
	}
	for _, bad := range []int64{-1, ledger.MaxHoldCredits + 1} {
		_, err := holdPriced(s, a, "", fmt.Sprint("bad", bad), bad)
		WantErr(t, err, ledger.ErrInvalidArgument)
	}
	VerifyClean(t, s)
}

// testHoldPriceRace: a 3-credit tool racing on 7 credits: exactly 2 are served and 1 credit is
// left, however the holds interleave.
func testHoldPriceRace(t *testing.T, eng engine) {
	const attempts = 20
	s := eng.open(t, 0)
	a := MustAccount(t, s, "race@example.com").ID
	MustGrant(t, s, a, ledger.Live, 7)
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, attempts)
	for i := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: fmt.Sprint("r", i), Tool: "bewerbung", Credits: 3}
			var err error
			if i%2 == 0 {
				_, err = s.Hold(bg, req)
			} else {
				_, err = s.Reserve(bg, req)
			}
			switch {
			case err == nil:
				ok.Add(1)
				if _, err := s.Settle(bg, a, req.RequestID); err != nil {
					errs <- err
				}
			case errors.Is(err, ledger.ErrInsufficientCredits):
				refused.Add(1)
			default:
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ok.Load() != 2 || refused.Load() != attempts-2 {
		t.Fatalf("%d served, %d refused; want 2 and %d", ok.Load(), refused.Load(), attempts-2)
	}
	if b := MustBalance(t, s, a); b.Balance != 1 || b.Available != 1 {
		t.Fatalf("balance: %+v, want 1 left", b)
	}
	VerifyClean(t, s)
}

// testHoldPriceBudgets: a key's budget and a member's monthly cap count a hold's price; a hold
// whose price does not fit is refused even when some room is left, and a void gives the whole
// price back.
func testHoldPriceBudgets(t *testing.T, eng engine) {
	t0 := time.Date(2031, 5, 10, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, time.Minute)
	a := MustAccount(t, s, "keyprice@example.com").ID
	MustGrant(t, s, a, ledger.Live, 100)
	_, k, err := s.CreateKey(bg, a, ledger.Live, "ci", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateKey(bg, a, k.ID, ledger.KeySettings{Name: "ci", Limits: ledger.KeyLimits{BudgetDay: 5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := holdPriced(s, a, k.ID, "k1", 3); err != nil {
		t.Fatal(err)
	}
	_, err = holdPriced(s, a, k.ID, "k2", 3) // 3 + 3 > 5
	WantBudget(t, err, ledger.BudgetDay, 5, time.Date(2031, 5, 11, 0, 0, 0, 0, time.UTC))
	if _, err := holdPriced(s, a, k.ID, "k3", 2); err != nil { // 3 + 2 = 5 fits
		t.Fatal(err)
	}
	if u := MustKeyOf(t, s, a, k.ID).Usage; u.Day != 5 || u.Total != 5 {
		t.Fatalf("key usage after 3 + 2: %+v", u)
	}
	if _, err := s.Void(bg, a, "k1", "backend_error"); err != nil {
		t.Fatal(err)
	}
	if u := MustKeyOf(t, s, a, k.ID).Usage; u.Day != 2 || u.Total != 2 {
		t.Fatalf("key usage after the void of 3: %+v", u)
	}
	if _, err := s.Settle(bg, a, "k3"); err != nil {
		t.Fatal(err)
	}

	// A budget set while priced holds are open counts them at their price.
	if _, err := holdPriced(s, a, "", "free", 1); err != nil {
		t.Fatal(err)
	}
	_, k2, err := s.CreateKey(bg, a, ledger.Live, "later", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holdPriced(s, a, k2.ID, "open4", 4); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateKey(bg, a, k2.ID, ledger.KeySettings{Name: "later", Limits: ledger.KeyLimits{BudgetTotal: 6}}); err != nil {
		t.Fatal(err)
	}
	if u := MustKeyOf(t, s, a, k2.ID).Usage; u.Total != 4 || u.Day != 4 {
		t.Fatalf("count from a budget set over an open hold of 4: %+v", u)
	}
	_, err = holdPriced(s, a, k2.ID, "over", 3)
	WantBudget(t, err, ledger.BudgetTotal, 6, time.Time{})

	// The member's monthly cap counts prices the same way.
	alice, bob, _ := Org(t, s, ledger.RoleMember)
	MustGrant(t, s, alice.ID, ledger.Live, 100)
	_, bk, err := s.CreateMemberKey(bg, alice.ID, bob.ID, ledger.Live, "bob's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetMemberCap(bg, alice.ID, bob.ID, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := holdPriced(s, alice.ID, bk.ID, "b1", 3); err != nil {
		t.Fatal(err)
	}
	_, err = holdPriced(s, alice.ID, bk.ID, "b2", 2) // 3 + 2 > 4
	WantErr(t, err, ledger.ErrMemberCapReached)
	if m, err := s.GetMembership(bg, alice.ID, bob.ID); err != nil || m.Used != 3 {
		t.Fatalf("bob's count after 3: %+v %v", m, err)
	}
	if _, err := s.Void(bg, alice.ID, "b1", "backend_error"); err != nil {
		t.Fatal(err)
	}
	if _, err := holdPriced(s, alice.ID, bk.ID, "b3", 4); err != nil {
		t.Fatalf("after the void gave 3 back: %v", err)
	}
	if m, err := s.GetMembership(bg, alice.ID, bob.ID); err != nil || m.Used != 4 {
		t.Fatalf("bob's count after 4: %+v %v", m, err)
	}

	// An expired hold settled late (its text was delivered before the expiry) charges its price
	// and takes its price back into the counts.
	t0 = t0.Add(2 * time.Minute)
	if _, err := eng.expire(t, s); err != nil {
		t.Fatal(err)
	}
	if m, err := s.GetMembership(bg, alice.ID, bob.ID); err != nil || m.Used != 0 {
		t.Fatalf("bob's count after the expiry: %+v %v", m, err)
	}
	before := MustBalance(t, s, alice.ID)
	r, err := s.SettleDecided(bg, alice.ID, "b3", t0.Add(-90*time.Second))
	if err != nil || r.State != ledger.HoldSettled || r.Credits != 4 {
		t.Fatalf("late settle: %+v %v", r, err)
	}
	if b := MustBalance(t, s, alice.ID); b.Balance != before.Balance-4 || b.Available != before.Available-4 {
		t.Fatalf("balance after a late settle of 4: %+v", b)
	}
	if m, err := s.GetMembership(bg, alice.ID, bob.ID); err != nil || m.Used != 4 {
		t.Fatalf("bob's count after the late settle: %+v %v", m, err)
	}
	VerifyClean(t, s)
}
