package ledgertest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// The low-balance alert's worklist (Mail.LowBalanceChanges). Run for every engine by the
// conformance suite.

// lowBalanceIDs is the ids of LowBalanceChanges(limit), failing the test on an error, and checks
// each change against the account as GetAccount and Balance see it.
func lowBalanceIDs(t *testing.T, s ledger.Store, limit int) []string {
	t.Helper()
	cs, err := s.LowBalanceChanges(bg, limit)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, c := range cs {
		ids = append(ids, c.Account.ID)
		a, err := s.GetAccount(bg, c.Account.ID)
		if err != nil {
			t.Fatal(err)
		}
		if c.Account != a {
			t.Errorf("change of %s carries %+v; the account is %+v", a.ID, c.Account, a)
		}
		if b := MustBalance(t, s, a.ID); c.Available != b.Available {
			t.Errorf("change of %s: available %d, Balance says %d", a.ID, c.Available, b.Available)
		}
		if c.Below() != (c.Available < a.LowBalanceAlert) || c.Below() == a.LowBalanceNotified {
			t.Errorf("change of %s is no change: available %d, alert %d, notified %v", a.ID, c.Available,
				a.LowBalanceAlert, a.LowBalanceNotified)
		}
	}
	return ids
}

func wantIDs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	want = slices.Clone(want)
	slices.Sort(want)
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %v, want %v (in id order)", what, got, want)
	}
}

// testLowBalanceChanges: exactly the active accounts with an alert whose available live credits
// are below it and not yet noted, or at or above it and noted; open holds count against the
// credits, test credits do not.
func testLowBalanceChanges(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	wantIDs(t, "empty store", lowBalanceIDs(t, s, 0))

	// acct makes an account with live credits and an alert (0: none), noted or not.
	acct := func(name string, credits, alert int64, notified bool) string {
		t.Helper()
		a := MustAccount(t, s, name+"@example.com")
		if credits > 0 {
			MustGrant(t, s, a.ID, ledger.Live, credits)
		}
		if alert > 0 {
			if _, err := s.SetLowBalanceAlert(bg, a.ID, alert); err != nil {
				t.Fatal(err)
			}
		}
		if notified {
			if c, err := s.NoteLowBalance(bg, a.ID, true); err != nil || !c {
				t.Fatalf("noting %s: %v, %v", name, c, err)
			}
		}
		return a.ID
	}
	below := acct("below", 3, 5, false)
	above := acct("above", 10, 5, false)
	belowNoted := acct("below-noted", 3, 5, true)
	aboveNoted := acct("above-noted", 10, 5, true)
	atNoted := acct("at-noted", 5, 5, true) // at the alert is not below it
	at := acct("at", 5, 5, false)
	zero := acct("zero", 0, 1, false)
	acct("no-alert", 0, 0, false)
	acct("no-alert-noted", 0, 0, true) // a flag without an alert is nothing to act on
	disabled := acct("disabled", 0, 5, false)
	if _, err := s.SetAccountStatus(bg, disabled, ledger.StatusDisabled); err != nil {
		t.Fatal(err)
	}
	held := acct("held", 6, 5, false) // 6 credits, 2 held: 4 available
	MustHold(t, s, held, ledger.Live, "h1")
	MustHold(t, s, held, ledger.Live, "h2")
	testOnly := acct("test-only", 0, 5, false) // test credits are not live credits
	MustGrant(t, s, testOnly, ledger.Test, 100)
	testHeld := acct("test-held", 5, 5, false) // a test hold takes no live credit
	MustGrant(t, s, testHeld, ledger.Test, 1)
	MustHold(t, s, testHeld, ledger.Test, "t1")

	wantIDs(t, "first look", lowBalanceIDs(t, s, 0), below, aboveNoted, atNoted, zero, held, testOnly)
	cs, err := s.LowBalanceChanges(bg, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Account.ID == held && (c.Available != 4 || c.Account.LowBalanceAlert != 5 || !c.Below()) {
			t.Fatalf("held: %+v; want 4 available of an alert of 5, below", c)
		}
		if c.Account.ID == aboveNoted && (c.Available != 10 || c.Below() || !c.Account.LowBalanceNotified) {
			t.Fatalf("above-noted: %+v; want 10 available, not below, noted", c)
		}
	}

	// Noting a change takes the account out; changes of credits and status bring accounts in.
	for _, id := range []string{below, aboveNoted} {
		b := id == below
		if c, err := s.NoteLowBalance(bg, id, b); err != nil || !c {
			t.Fatalf("noting %s: %v, %v", id, c, err)
		}
	}
	if _, err := s.Void(bg, held, "h1", "test"); err != nil { // 5 available: at the alert
		t.Fatal(err)
	}
	MustGrant(t, s, belowNoted, ledger.Live, 2) // 5: back at the alert, noted below
	MustHold(t, s, at, ledger.Live, "a1")       // 4 available: below
	if _, err := s.SetAccountStatus(bg, disabled, ledger.StatusActive); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetLowBalanceAlert(bg, zero, 0); err != nil { // alert off
		t.Fatal(err)
	}
	if _, err := s.SetLowBalanceAlert(bg, above, 11); err != nil { // 10 is below the new alert
		t.Fatal(err)
	}
	wantIDs(t, "after the changes", lowBalanceIDs(t, s, 0), above, belowNoted, atNoted, at, disabled, testOnly)

	// The limit: the first ones in id order.
	all := lowBalanceIDs(t, s, 0)
	wantIDs(t, "limit 2", lowBalanceIDs(t, s, 2), all[:2]...)
	wantIDs(t, "limit 1000", lowBalanceIDs(t, s, 1000), all...)
	wantIDs(t, "limit over the maximum", lowBalanceIDs(t, s, 5000), all...)
	_, err = s.LowBalanceChanges(bg, -1)
	WantErr(t, err, ledger.ErrInvalidArgument)

	// Noting every change, a page at a time, empties the list: what the alert's sender does.
	for range 10 {
		cs, err := s.LowBalanceChanges(bg, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if ch, err := s.NoteLowBalance(bg, c.Account.ID, c.Below()); err != nil || !ch {
				t.Fatalf("noting %s: %v, %v", c.Account.ID, ch, err)
			}
		}
		if len(cs) < 2 {
			break
		}
	}
	wantIDs(t, "all noted", lowBalanceIDs(t, s, 0))
	VerifyClean(t, s)
}

// testLowBalanceChangesDefaultLimit: limit 0 is 50.
func testLowBalanceChangesDefaultLimit(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	var ids []string
	for i := range 53 {
		a := MustAccount(t, s, fmt.Sprintf("low%02d@example.com", i))
		if _, err := s.SetLowBalanceAlert(bg, a.ID, 1); err != nil { // 0 credits: below
			t.Fatal(err)
		}
		ids = append(ids, a.ID)
	}
	slices.Sort(ids)
	wantIDs(t, "limit 0", lowBalanceIDs(t, s, 0), ids[:50]...)
	wantIDs(t, "limit 60", lowBalanceIDs(t, s, 60), ids...)
}
