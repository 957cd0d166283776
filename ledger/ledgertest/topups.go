package ledgertest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The TopUps role: a saved card and rule per account, and top-ups begun one at a time within
// the monthly cap. Run for every engine by the conformance suite.

// TopUpCard is a card as the payment provider names it.
var TopUpCard = ledger.TopUpCard{CustomerID: "cus_test1", PaymentMethodID: "pm_card_visa", Brand: "visa", Last4: "4242"}

// MustTopUpRule saves card and an enabled rule of threshold, package "starter" and monthly cap
// for acct, failing the test on an error.
func MustTopUpRule(t testing.TB, s ledger.Store, acct string, threshold int64, monthlyCap int) ledger.TopUpRule {
	t.Helper()
	if _, err := s.SaveTopUpCard(bg, acct, TopUpCard); err != nil {
		t.Fatal(err)
	}
	r, err := s.SetTopUpRule(bg, acct, ledger.TopUpSettings{Threshold: threshold, Package: "starter", MonthlyCap: monthlyCap, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// refusal returns why BeginTopUp refused, failing the test if it did not.
func refusal(t *testing.T, s ledger.Store, acct string) string {
	t.Helper()
	tu, err := s.BeginTopUp(bg, acct)
	var r *ledger.TopUpRefusal
	if !errors.As(err, &r) || !errors.Is(err, ledger.ErrTopUpRefused) {
		t.Fatalf("BeginTopUp = %+v, %v; want a refusal", tu, err)
	}
	return r.Reason
}

// testTopUpRules: a card and a rule are saved, read back and listed while active; a pause
// stops them and a new card unpauses; bad arguments and unknown accounts are refused.
func testTopUpRules(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	a := MustAccount(t, s, "topup-rules@example.com")
	if _, err := s.TopUpRule(bg, a.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("rule of a new account: %v, want ErrNotFound", err)
	}
	if _, err := s.SaveTopUpCard(bg, "acct_nobodynobodynobo", TopUpCard); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("card of an unknown account: %v", err)
	}
	for _, c := range []ledger.TopUpCard{{PaymentMethodID: "pm_1"}, {CustomerID: "cus_1"}, {CustomerID: "cus_1", PaymentMethodID: "pm_1", Last4: "12345"}} {
		if _, err := s.SaveTopUpCard(bg, a.ID, c); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("card %+v: %v, want ErrInvalidArgument", c, err)
		}
	}
	for _, st := range []ledger.TopUpSettings{
		{Threshold: 0, Package: "starter", MonthlyCap: 1}, {Threshold: 10, Package: "", MonthlyCap: 1},
		{Threshold: 10, Package: "starter", MonthlyCap: 0}, {Threshold: 10, Package: "starter", MonthlyCap: ledger.MaxTopUpCap + 1},
	} {
		if _, err := s.SetTopUpRule(bg, a.ID, st); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("settings %+v: %v, want ErrInvalidArgument", st, err)
		}
	}
	r, err := s.SaveTopUpCard(bg, a.ID, TopUpCard)
	if err != nil || r.Card != TopUpCard || r.Enabled || r.Active() || !r.Updated.Equal(clock) {
		t.Fatalf("first card: %+v, %v", r, err)
	}
	if got := refusal(t, s, a.ID); got != ledger.TopUpRefusedDisabled {
		t.Fatalf("refusal without a rule: %q", got)
	}
	st := ledger.TopUpSettings{Threshold: 50, Package: "starter", MonthlyCap: 3, Enabled: true}
	if r, err = s.SetTopUpRule(bg, a.ID, st); err != nil || r.TopUpSettings != st || r.Card != TopUpCard || !r.Active() {
		t.Fatalf("rule: %+v, %v", r, err)
	}
	if got, err := s.TopUpRule(bg, a.ID); err != nil || got != r {
		t.Fatalf("read back %+v, %v; want %+v", got, err, r)
	}
	active, err := s.ActiveTopUpRules(bg)
	if err != nil || len(active) != 1 || active[0].AccountID != a.ID {
		t.Fatalf("active rules %+v, %v", active, err)
	}
	if r, err = s.PauseTopUp(bg, a.ID, "card declined"); err != nil || !r.Paused || r.PausedWhy != "card declined" || r.Active() {
		t.Fatalf("paused %+v, %v", r, err)
	}
	if active, _ := s.ActiveTopUpRules(bg); len(active) != 0 {
		t.Fatalf("a paused rule is active: %+v", active)
	}
	if got := refusal(t, s, a.ID); got != ledger.TopUpRefusedPaused {
		t.Fatalf("refusal of a paused rule: %q", got)
	}
	// Saving the settings keeps the pause; a new card lifts it.
	if r, _ = s.SetTopUpRule(bg, a.ID, st); !r.Paused {
		t.Fatalf("settings lifted the pause: %+v", r)
	}
	card2 := ledger.TopUpCard{CustomerID: "cus_test1", PaymentMethodID: "pm_card_mastercard", Brand: "mastercard", Last4: "4444"}
	if r, err = s.SaveTopUpCard(bg, a.ID, card2); err != nil || r.Paused || r.PausedWhy != "" || r.Card != card2 || r.TopUpSettings != st {
		t.Fatalf("new card %+v, %v", r, err)
	}
	if _, err := s.PauseTopUp(bg, a.ID, ""); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("a pause without a reason: %v", err)
	}
	if _, err := s.BeginTopUp(bg, "acct_nobodynobodynobo"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("BeginTopUp of an account without a rule: %v", err)
	}
}

// testTopUpLifecycle: one pending top-up at a time; succeeded ones count against the monthly
// cap (the next month starts afresh); a failure or a payment that needs the customer pauses
// the rule; a late or repeated move changes nothing.
func testTopUpLifecycle(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 12, 30, 23, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	a := MustAccount(t, s, "topup-life@example.com")
	MustTopUpRule(t, s, a.ID, 50, 2)
	t1, err := s.BeginTopUp(bg, a.ID)
	if err != nil || t1.Status != ledger.TopUpPending || t1.Month != "2026-12" || t1.Package != "starter" || t1.AccountID != a.ID || !t1.Created.Equal(clock) {
		t.Fatalf("first top-up %+v, %v", t1, err)
	}
	if got := refusal(t, s, a.ID); got != ledger.TopUpRefusedPending {
		t.Fatalf("second while one is pending: %q", got)
	}
	if got, err := s.SetTopUpPaymentIntent(bg, t1.ID, "pi_1"); err != nil || got.PaymentIntent != "pi_1" {
		t.Fatalf("payment intent: %+v, %v", got, err)
	}
	got, changed, err := s.FinishTopUp(bg, t1.ID, ledger.TopUpSucceeded, "")
	if err != nil || !changed || got.Status != ledger.TopUpSucceeded || got.PaymentIntent != "pi_1" {
		t.Fatalf("succeeded: %+v, %v, %v", got, changed, err)
	}
	// A late failure of a succeeded top-up changes nothing and pauses nothing.
	if got, changed, err = s.FinishTopUp(bg, t1.ID, ledger.TopUpFailed, "late"); err != nil || changed || got.Status != ledger.TopUpSucceeded {
		t.Fatalf("late failure: %+v, %v, %v", got, changed, err)
	}
	if r, _ := s.TopUpRule(bg, a.ID); r.Paused {
		t.Fatalf("a late failure paused the rule: %+v", r)
	}
	clock = clock.Add(time.Minute)
	t2, err := s.BeginTopUp(bg, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.FinishTopUp(bg, t2.ID, ledger.TopUpSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if got := refusal(t, s, a.ID); got != ledger.TopUpRefusedCap {
		t.Fatalf("past the monthly cap of 2: %q", got)
	}
	// The next month (UTC) starts afresh.
	clock = time.Date(2027, 1, 1, 0, 0, 1, 0, time.UTC)
	t3, err := s.BeginTopUp(bg, a.ID)
	if err != nil || t3.Month != "2027-01" {
		t.Fatalf("in the next month: %+v, %v", t3, err)
	}
	// A decline fails it and pauses the rule with its reason.
	got, changed, err = s.FinishTopUp(bg, t3.ID, ledger.TopUpFailed, "Your card was declined.")
	if err != nil || !changed || got.Status != ledger.TopUpFailed || got.Detail != "Your card was declined." {
		t.Fatalf("failed: %+v, %v, %v", got, changed, err)
	}
	r, _ := s.TopUpRule(bg, a.ID)
	if !r.Paused || r.PausedWhy != "Your card was declined." {
		t.Fatalf("rule after a decline: %+v", r)
	}
	if got := refusal(t, s, a.ID); got != ledger.TopUpRefusedPaused {
		t.Fatalf("after a decline: %q", got)
	}
	// A new card: the failed top-up does not count against the cap.
	if _, err := s.SaveTopUpCard(bg, a.ID, TopUpCard); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Minute)
	t4, err := s.BeginTopUp(bg, a.ID)
	if err != nil {
		t.Fatalf("after a new card: %v", err)
	}
	if got, changed, err = s.FinishTopUp(bg, t4.ID, ledger.TopUpNeedsAction, "authentication required"); err != nil || !changed || got.Status != ledger.TopUpNeedsAction {
		t.Fatalf("needs action: %+v, %v, %v", got, changed, err)
	}
	if r, _ := s.TopUpRule(bg, a.ID); !r.Paused {
		t.Fatalf("needs action did not pause: %+v", r)
	}
	// The customer completes it: it succeeds, once.
	if got, changed, err = s.FinishTopUp(bg, t4.ID, ledger.TopUpSucceeded, ""); err != nil || !changed || got.Status != ledger.TopUpSucceeded {
		t.Fatalf("completed: %+v, %v, %v", got, changed, err)
	}
	if _, changed, _ = s.FinishTopUp(bg, t4.ID, ledger.TopUpSucceeded, ""); changed {
		t.Fatal("a repeated success changed the top-up")
	}
	list, err := s.ListTopUps(bg, a.ID, 0)
	if err != nil || len(list) != 4 || list[0].ID != t4.ID || list[3].ID != t1.ID {
		t.Fatalf("list %+v, %v", list, err)
	}
	b := MustAccount(t, s, "topup-other@example.com")
	MustTopUpRule(t, s, b.ID, 10, 1)
	clock = clock.Add(time.Minute)
	tb, err := s.BeginTopUp(bg, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ListTopUps(bg, a.ID, 0); len(l) != 4 {
		t.Fatalf("account a lists %d top-ups", len(l))
	}
	if l, _ := s.ListTopUps(bg, "", 2); len(l) != 2 || l[0].ID != tb.ID {
		t.Fatalf("every account's, 2: %+v", l)
	}
	if got, err := s.GetTopUp(bg, tb.ID); err != nil || got != tb {
		t.Fatalf("get %+v, %v; want %+v", got, err, tb)
	}
	if _, err := s.GetTopUp(bg, "topup_none"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("get of no top-up: %v", err)
	}
	if _, _, err := s.FinishTopUp(bg, tb.ID, "paid", ""); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("a bad status: %v", err)
	}
	if _, err := s.ListTopUps(bg, "", -1); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("a negative limit: %v", err)
	}
}

// testTopUpRace: 20 BeginTopUp at once for one account make one top-up; the others are refused
// because it is pending. Then, with a cap of 1 and that one succeeded, 20 at once make none.
func testTopUpRace(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "topup-race@example.com")
	MustTopUpRule(t, s, a.ID, 50, 1)
	race := func() (made []ledger.TopUp) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				tu, err := s.BeginTopUp(bg, a.ID)
				if err != nil && !errors.Is(err, ledger.ErrTopUpRefused) {
					t.Errorf("BeginTopUp: %v", err)
				}
				if err == nil {
					mu.Lock()
					made = append(made, tu)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return made
	}
	made := race()
	if len(made) != 1 {
		t.Fatalf("20 racing BeginTopUp made %d top-ups, want 1", len(made))
	}
	if _, _, err := s.FinishTopUp(bg, made[0].ID, ledger.TopUpSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if again := race(); len(again) != 0 {
		t.Fatalf("past the cap, 20 racing BeginTopUp made %d", len(again))
	}
}
