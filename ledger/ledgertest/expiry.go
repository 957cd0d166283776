package ledgertest

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Credits that expire (ledger/expiry.go): spent soonest-expiring first, never-expiring last; at
// expiry what is left and not held leaves through an entry of kind expire; a hold open across
// the expiry keeps what it took. Run for every engine by the conformance suite, on a clock the
// tests move.

var expiryStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// expiryStore is a store on the test's clock at expiryStart, and the clock.
func expiryStore(t *testing.T, eng engine) (ledger.Store, *time.Time) {
	t.Helper()
	now := expiryStart
	eng.setNow(t, &now)
	return eng.open(t, 1000*24*time.Hour), &now // holds outlive every expiry here
}

func grantExpiring(t testing.TB, s ledger.Store, acct string, n int64, expires time.Time) ledger.GrantResult {
	t.Helper()
	r, err := s.Grant(bg, ledger.GrantRequest{AccountID: acct, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: n,
		Reason: "expiring", Expires: expires})
	if err != nil {
		t.Fatalf("grant %d expiring %s: %v", n, expires, err)
	}
	return r
}

func holdOf(t testing.TB, s ledger.Store, acct, rid string, credits int64) {
	t.Helper()
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: rid, Credits: credits}); err != nil {
		t.Fatalf("hold %s of %d: %v", rid, credits, err)
	}
}

// wantExpiring fails unless acct's live figures are bal and avail and its Expiring is want.
func wantExpiring(t testing.TB, s ledger.Store, acct string, bal, avail int64, want ...ledger.ExpiringCredits) {
	t.Helper()
	b := MustBalance(t, s, acct)
	if b.Balance != bal || b.Available != avail {
		t.Fatalf("balance %d available %d; want %d %d (%+v)", b.Balance, b.Available, bal, avail, b)
	}
	got := b.Expiring
	for i := range got {
		got[i].Expires = got[i].Expires.UTC()
	}
	if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
		t.Fatalf("expiring %+v; want %+v", got, want)
	}
}

// expireEntries returns acct's entries of kind expire, newest first.
func expireEntries(t testing.TB, s ledger.Store, acct string) []ledger.Entry {
	t.Helper()
	var out []ledger.Entry
	for _, e := range AllHistory(t, s, acct) {
		if e.Kind == ledger.KindExpire {
			out = append(out, e)
		}
	}
	return out
}

func testExpirySpendsSoonestFirst(t *testing.T, eng engine) {
	s, _ := expiryStore(t, eng)
	a := MustAccount(t, s, "soonest@example.com").ID
	t1 := expiryStart.Add(24 * time.Hour)
	g := grantExpiring(t, s, a, 10, t1)
	MustGrant(t, s, a, ledger.Live, 5)
	wantExpiring(t, s, a, 15, 15, ledger.ExpiringCredits{Credits: 10, Expires: t1})
	holdOf(t, s, a, "r1", 3)
	wantExpiring(t, s, a, 15, 12, ledger.ExpiringCredits{Credits: 7, Expires: t1})
	if _, err := s.Settle(bg, a, "r1"); err != nil {
		t.Fatal(err)
	}
	wantExpiring(t, s, a, 12, 12, ledger.ExpiringCredits{Credits: 7, Expires: t1})
	// A hold larger than the lot takes all of it, then never-expiring credits.
	holdOf(t, s, a, "r2", 9)
	wantExpiring(t, s, a, 12, 3)
	if _, err := s.Settle(bg, a, "r2"); err != nil {
		t.Fatal(err)
	}
	wantExpiring(t, s, a, 3, 3)
	if e := g.Entry; e.Kind != ledger.KindGrant || e.Amount != 10 {
		t.Fatalf("grant entry %+v", e)
	}
	VerifyClean(t, s)
}

// testExpiryWithOpenHold: 10 credits expire at T1, 5 never; a 2-credit hold is open across T1.
// The expiry takes the 8 not held; settling the hold afterwards charges its 2 and nothing more
// expires; voiding it instead lets its 2 expire at once.
func testExpiryWithOpenHold(settle bool) func(t *testing.T, eng engine) {
	return func(t *testing.T, eng engine) {
		s, now := expiryStore(t, eng)
		a := MustAccount(t, s, "across@example.com").ID
		t1 := expiryStart.Add(90 * 24 * time.Hour)
		g := grantExpiring(t, s, a, 10, t1)
		MustGrant(t, s, a, ledger.Live, 5)
		holdOf(t, s, a, "open", 2)
		wantExpiring(t, s, a, 15, 13, ledger.ExpiringCredits{Credits: 8, Expires: t1})
		VerifyClean(t, s)

		*now = t1
		if _, err := eng.expire(t, s); err != nil {
			t.Fatal(err)
		}
		wantExpiring(t, s, a, 7, 5)
		xs := expireEntries(t, s, a)
		if len(xs) != 1 || xs[0].Amount != -8 || xs[0].Mode != ledger.Live || !strings.Contains(xs[0].Reason, "expired") ||
			xs[0].BalanceAfter != 7 || xs[0].AvailableAfter != 5 {
			t.Fatalf("expire entries %+v", xs)
		}
		if seq, ok := ledger.ExpiredLot(xs[0]); !ok || seq != g.Entry.Seq {
			t.Fatalf("expire entry names lot %d (%v); want %d", seq, ok, g.Entry.Seq)
		}
		VerifyClean(t, s)
		// The never-expiring credits are untouched: a hold may take all 5 of them.
		holdOf(t, s, a, "never", 5)
		if _, err := s.Void(bg, a, "never", "test"); err != nil {
			t.Fatal(err)
		}

		*now = t1.Add(time.Minute)
		if settle {
			r, err := s.Settle(bg, a, "open")
			if err != nil || r.Credits != 2 {
				t.Fatalf("settle: %+v %v", r, err)
			}
			wantExpiring(t, s, a, 5, 5)
			if xs := expireEntries(t, s, a); len(xs) != 1 {
				t.Fatalf("expire entries after the settle %+v", xs)
			}
		} else {
			if _, err := s.Void(bg, a, "open", "client went away"); err != nil {
				t.Fatal(err)
			}
			wantExpiring(t, s, a, 5, 5)
			xs := expireEntries(t, s, a)
			if len(xs) != 2 || xs[0].Amount != -2 { // newest first
				t.Fatalf("expire entries after the void %+v", xs)
			}
		}
		if _, err := eng.expire(t, s); err != nil {
			t.Fatal(err)
		}
		wantExpiring(t, s, a, 5, 5)
		VerifyClean(t, s)
	}
}

func testExpiryTwoLots(t *testing.T, eng engine) {
	s, now := expiryStore(t, eng)
	a := MustAccount(t, s, "twolots@example.com").ID
	t1, t2 := expiryStart.Add(48*time.Hour), expiryStart.Add(24*time.Hour)
	grantExpiring(t, s, a, 4, t1)
	grantExpiring(t, s, a, 6, t2) // granted later, expires sooner
	MustGrant(t, s, a, ledger.Live, 1)
	wantExpiring(t, s, a, 11, 11, ledger.ExpiringCredits{Credits: 6, Expires: t2}, ledger.ExpiringCredits{Credits: 4, Expires: t1})
	holdOf(t, s, a, "r", 7) // 6 of the sooner lot, 1 of the later
	if _, err := s.Settle(bg, a, "r"); err != nil {
		t.Fatal(err)
	}
	wantExpiring(t, s, a, 4, 4, ledger.ExpiringCredits{Credits: 3, Expires: t1})
	*now = t2
	wantExpiring(t, s, a, 4, 4, ledger.ExpiringCredits{Credits: 3, Expires: t1})
	if xs := expireEntries(t, s, a); len(xs) != 0 {
		t.Fatalf("a spent lot expired: %+v", xs)
	}
	// Balance alone makes what is due leave.
	*now = t1
	wantExpiring(t, s, a, 1, 1)
	if xs := expireEntries(t, s, a); len(xs) != 1 || xs[0].Amount != -3 {
		t.Fatalf("expire entries %+v", xs)
	}
	// A hold after the expiry cannot take what expired.
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "late", Credits: 2}); !errors.Is(err, ledger.ErrInsufficientCredits) {
		t.Fatalf("hold of expired credits: %v", err)
	}
	VerifyClean(t, s)
}

func testExpiryRefund(t *testing.T, eng engine) {
	s, now := expiryStore(t, eng)
	a := MustAccount(t, s, "refundlot@example.com").ID
	t1 := expiryStart.Add(30 * 24 * time.Hour)
	grantExpiring(t, s, a, 10, t1)
	if _, err := s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10,
		Reference: "cs_exp", AmountCents: 1000, Currency: "EUR", Expires: t1.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	MustRecordPayment(t, s, ledger.Payment{ID: "pi_exp", Reference: "cs_exp", AccountID: a, Package: "10", Credits: 10,
		AmountCents: 1000, Currency: "eur", Status: ledger.PaymentPaid})
	wantExpiring(t, s, a, 20, 20, ledger.ExpiringCredits{Credits: 10, Expires: t1}, ledger.ExpiringCredits{Credits: 10, Expires: t1.Add(time.Hour)})
	// The refund of half the purchase takes 5 of the purchase's own lot, not of the sooner one.
	MustReverse(t, s, Refund("re_exp", "pi_exp", 500))
	wantExpiring(t, s, a, 15, 15, ledger.ExpiringCredits{Credits: 10, Expires: t1}, ledger.ExpiringCredits{Credits: 5, Expires: t1.Add(time.Hour)})
	VerifyClean(t, s)
	*now = t1.Add(time.Hour)
	wantExpiring(t, s, a, 0, 0)
	VerifyClean(t, s)
}

func testExpiryInvalid(t *testing.T, eng engine) {
	s, _ := expiryStore(t, eng)
	a := MustAccount(t, s, "badexpiry@example.com").ID
	for name, req := range map[string]ledger.GrantRequest{
		"past":       {AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1, Expires: expiryStart.Add(-time.Second)},
		"now":        {AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1, Expires: expiryStart},
		"test":       {AccountID: a, Mode: ledger.Test, Kind: ledger.KindGrant, Credits: 1, Expires: expiryStart.Add(time.Hour)},
		"adjustment": {AccountID: a, Mode: ledger.Live, Kind: ledger.KindAdjustment, Credits: 1, Expires: expiryStart.Add(time.Hour)},
	} {
		if _, err := s.Grant(bg, req); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", name, err)
		}
	}
	wantExpiring(t, s, a, 0, 0)
}
