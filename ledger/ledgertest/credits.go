package ledgertest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

func testHoldSettleVoid(t *testing.T, eng engine) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "h@example.com").ID

	_, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "r0"})
	WantErr(t, err, ledger.ErrInsufficientCredits)
	MustGrant(t, s, a, ledger.Live, 2)

	if r := MustHold(t, s, a, ledger.Live, "r1"); r.State != ledger.HoldOpen || r.Available != 1 || r.Repeated {
		t.Fatalf("hold r1: %+v", r)
	}
	if r := MustHold(t, s, a, ledger.Live, "r2"); r.Available != 0 {
		t.Fatalf("hold r2: %+v", r)
	}
	before := len(AllHistory(t, s, a))
	_, err = s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "r3"})
	WantErr(t, err, ledger.ErrInsufficientCredits)
	if n := len(AllHistory(t, s, a)); n != before {
		t.Fatalf("a refused hold wrote %d entries", n-before)
	}
	// Test credits are separate.
	_, err = s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Test, RequestID: "t1"})
	WantErr(t, err, ledger.ErrInsufficientCredits)

	if b := MustBalance(t, s, a); b.Balance != 2 || b.Available != 0 {
		t.Fatalf("balance with two holds: %+v", b)
	}
	r, err := s.Settle(bg, a, "r1")
	if err != nil || r.State != ledger.HoldSettled || r.Available != 0 || r.Repeated {
		t.Fatalf("settle r1: %+v %v", r, err)
	}
	r, err = s.Void(bg, a, "r2", "backend_error")
	if err != nil || r.State != ledger.HoldVoided || r.Available != 1 || r.Repeated {
		t.Fatalf("void r2: %+v %v", r, err)
	}
	if b := MustBalance(t, s, a); b.Balance != 1 || b.Available != 1 {
		t.Fatalf("balance after settle and void: %+v", b)
	}

	// Repeats report the first outcome and write nothing.
	n := len(AllHistory(t, s, a))
	for _, c := range []struct {
		f    func() (ledger.HoldResult, error)
		want ledger.HoldState
	}{
		{func() (ledger.HoldResult, error) { return s.Settle(bg, a, "r1") }, ledger.HoldSettled},
		{func() (ledger.HoldResult, error) { return s.Void(bg, a, "r1", "x") }, ledger.HoldSettled},
		{func() (ledger.HoldResult, error) {
			return s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "r1"})
		}, ledger.HoldSettled},
		{func() (ledger.HoldResult, error) { return s.Settle(bg, a, "r2") }, ledger.HoldVoided},
		{func() (ledger.HoldResult, error) { return s.Void(bg, a, "r2", "again") }, ledger.HoldVoided},
	} {
		r, err := c.f()
		if err != nil || !r.Repeated || r.State != c.want || r.Available != 1 {
			t.Fatalf("repeat: %+v %v, want %s", r, err, c.want)
		}
	}
	r4 := MustHold(t, s, a, ledger.Live, "r4")
	if r, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "r4"}); err != nil || !r.Repeated || r.State != ledger.HoldOpen || r.Available != 0 {
		t.Fatalf("repeated open hold: %+v %v (first %+v)", r, err, r4)
	}
	if got := len(AllHistory(t, s, a)); got != n+1 {
		t.Fatalf("repeats wrote %d entries", got-n-1)
	}

	_, err = s.Settle(bg, a, "nope")
	WantErr(t, err, ledger.ErrNotFound)
	_, err = s.Void(bg, "acct_missing", "r1", "")
	WantErr(t, err, ledger.ErrNotFound)

	// A disabled account takes no new holds but resolves open ones.
	if _, err := s.SetAccountStatus(bg, a, ledger.StatusDisabled); err != nil {
		t.Fatal(err)
	}
	_, err = s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "r5"})
	WantErr(t, err, ledger.ErrAccountDisabled)
	if r, err := s.Settle(bg, a, "r4"); err != nil || r.State != ledger.HoldSettled {
		t.Fatalf("settle on disabled account: %+v %v", r, err)
	}

	for _, req := range []ledger.HoldRequest{
		{AccountID: a, Mode: "prod", RequestID: "x"},
		{AccountID: a, Mode: ledger.Live},
		{AccountID: a, Mode: ledger.Live, RequestID: strings.Repeat("r", 129)},
		{AccountID: a, Mode: ledger.Live, RequestID: "x", Tool: strings.Repeat("t", 65)},
	} {
		_, err := s.Hold(bg, req)
		WantErr(t, err, ledger.ErrInvalidArgument)
	}

	// The entries tell the whole story.
	h := AllHistory(t, s, a)
	type line struct {
		kind               ledger.EntryKind
		amount, bal, avail int64
		rid, reason        string
	}
	want := []line{
		{ledger.KindSettle, -1, 0, 0, "r4", ""},
		{ledger.KindHold, 0, 1, 0, "r4", ""},
		{ledger.KindVoid, 0, 1, 1, "r2", "backend_error"},
		{ledger.KindSettle, -1, 1, 0, "r1", ""},
		{ledger.KindHold, 0, 2, 0, "r2", ""},
		{ledger.KindHold, 0, 2, 1, "r1", ""},
		{ledger.KindGrant, 2, 2, 2, "", ""},
	}
	if len(h) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(h), len(want), h)
	}
	for i, e := range h {
		w := want[i]
		if e.Kind != w.kind || e.Amount != w.amount || e.BalanceAfter != w.bal || e.AvailableAfter != w.avail ||
			e.RequestID != w.rid || e.Reason != w.reason || e.Seq != uint64(len(h)-i) || e.Mode != ledger.Live ||
			e.AccountID != a || !e.Time.Equal(t0) {
			t.Fatalf("entry %d: %+v, want %+v", i, e, w)
		}
		if e.Kind == ledger.KindHold || e.Kind == ledger.KindSettle || e.Kind == ledger.KindVoid {
			if e.KeyID != "key_test" || e.Tool != "summarize" {
				t.Fatalf("entry %d lacks key id or tool: %+v", i, e)
			}
		}
	}
	VerifyClean(t, s)
}

func testTestModeIsSeparate(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "t@example.com").ID
	MustGrant(t, s, a, ledger.Live, 5)
	MustGrant(t, s, a, ledger.Test, 1)
	MustHold(t, s, a, ledger.Test, "t1")
	_, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Test, RequestID: "t2"})
	WantErr(t, err, ledger.ErrInsufficientCredits)
	if _, err := s.Settle(bg, a, "t1"); err != nil {
		t.Fatal(err)
	}
	if b := MustBalance(t, s, a); !reflect.DeepEqual(b, ledger.Balance{AccountID: a, Balance: 5, Available: 5}) {
		t.Fatalf("balance %+v", b)
	}
	VerifyClean(t, s)
}

func testGrantIdempotentOnReference(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "g@example.com").ID
	b := MustAccount(t, s, "g2@example.com").ID

	first, err := s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10,
		Reference: "pi_123", AmountCents: 200, Currency: "EUR"})
	if err != nil || first.Repeated || first.Balance.Available != 10 || first.Entry.AmountCents != 200 ||
		first.Entry.Reference != "pi_123" || first.Entry.Kind != ledger.KindPurchase {
		t.Fatalf("purchase: %+v %v", first, err)
	}
	// A replayed notification, even with other figures, credits nothing.
	for range 3 {
		r, err := s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 99, Reference: "pi_123"})
		if err != nil || !r.Repeated || r.Entry != first.Entry || r.Balance.Balance != 10 {
			t.Fatalf("replay: %+v %v", r, err)
		}
	}
	// References are per account.
	if r, err := s.Grant(bg, ledger.GrantRequest{AccountID: b, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10, Reference: "pi_123"}); err != nil || r.Repeated {
		t.Fatalf("same reference on another account: %+v %v", r, err)
	}
	// Grants without a reference are not deduplicated.
	MustGrant(t, s, a, ledger.Live, 1)
	MustGrant(t, s, a, ledger.Live, 1)
	if bal := MustBalance(t, s, a); bal.Balance != 12 {
		t.Fatalf("balance %+v", bal)
	}

	// Adjustments.
	MustHold(t, s, a, ledger.Live, "h1")
	r, err := s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindAdjustment, Credits: -11, Reason: "refund"})
	if err != nil || r.Balance.Balance != 1 || r.Balance.Available != 0 || r.Entry.Amount != -11 || r.Entry.AvailableAfter != 0 {
		t.Fatalf("adjustment: %+v %v", r, err)
	}
	_, err = s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindAdjustment, Credits: -1})
	WantErr(t, err, ledger.ErrInsufficientCredits)
	_, err = s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Test, Kind: ledger.KindAdjustment, Credits: -1})
	WantErr(t, err, ledger.ErrInsufficientCredits)

	for _, req := range []ledger.GrantRequest{
		{AccountID: a, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10},
		{AccountID: a, Mode: ledger.Test, Kind: ledger.KindPurchase, Credits: 10, Reference: "pi_t"},
		{AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 0},
		{AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: -5},
		{AccountID: a, Mode: ledger.Live, Kind: ledger.KindAdjustment},
		{AccountID: a, Mode: ledger.Live, Kind: ledger.KindSettle, Credits: 1},
		{AccountID: a, Mode: "x", Kind: ledger.KindGrant, Credits: 1},
		{AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1, Reference: strings.Repeat("r", 257)},
		{AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1, AmountCents: -1},
	} {
		_, err := s.Grant(bg, req)
		WantErr(t, err, ledger.ErrInvalidArgument)
	}
	_, err = s.Grant(bg, ledger.GrantRequest{AccountID: "acct_missing", Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1})
	WantErr(t, err, ledger.ErrNotFound)
	VerifyClean(t, s)
}

// testHoldExpiry: the expiry sweep voids a hold when its TTL is over, not a second earlier, and
// Verify reports a hold left open long past its expiry. (That the store voids expired holds
// when it opens is engine-specific: TestOpenVoidsExpiredHolds for Badger.)
func testHoldExpiry(t *testing.T, eng engine) {
	t0 := time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 10*time.Minute)
	a := MustAccount(t, s, "e@example.com").ID
	MustGrant(t, s, a, ledger.Live, 3)
	MustHold(t, s, a, ledger.Live, "old")
	t0 = t0.Add(5 * time.Minute)
	MustHold(t, s, a, ledger.Live, "young")

	t0 = t0.Add(5*time.Minute - time.Second)
	if n, err := eng.expire(t, s); err != nil || n != 0 {
		t.Fatalf("sweep before expiry: %d %v", n, err)
	}
	t0 = t0.Add(time.Second)
	if n, err := eng.expire(t, s); err != nil || n != 1 {
		t.Fatalf("sweep at expiry: %d %v", n, err)
	}
	if b := MustBalance(t, s, a); b.Balance != 3 || b.Available != 2 {
		t.Fatalf("after sweep %+v", b)
	}
	if e := AllHistory(t, s, a)[0]; e.Kind != ledger.KindVoid || e.Reason != "expired" || e.RequestID != "old" || e.Tool != "summarize" {
		t.Fatalf("sweep entry %+v", e)
	}
	if r, err := s.Settle(bg, a, "old"); err != nil || !r.Repeated || r.State != ledger.HoldVoided {
		t.Fatalf("settle after expiry: %+v %v", r, err)
	}
	VerifyClean(t, s)

	// Verify reports a hold left open long past its expiry (no sweep runs here).
	t0 = t0.Add(time.Hour)
	r, err := s.Verify(bg)
	if err != nil || r.OK || len(r.Problems) != 1 || r.Problems[0].Kind != "expired_open_hold" {
		t.Fatalf("verify with a stale hold: %+v %v", r, err)
	}
}

// testHoldOwnTTL: a hold expires after the TTL it was created with, whatever the store's
// default, so handlers sharing a store (or a reload that changed hold_ttl) each keep their own.
func testHoldOwnTTL(t *testing.T, eng engine) {
	t0 := time.Date(2030, 3, 2, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 10*time.Minute)
	a := MustAccount(t, s, "ttl@example.com").ID
	MustGrant(t, s, a, ledger.Live, 3)
	for _, h := range []struct {
		rid string
		ttl time.Duration
	}{{"short", 2 * time.Minute}, {"default", 0}, {"long", 30 * time.Minute}} {
		if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: h.rid, TTL: h.ttl}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "negative", TTL: -time.Second})
	WantErr(t, err, ledger.ErrInvalidArgument)

	var voided []string
	for _, step := range []time.Duration{2 * time.Minute, 8 * time.Minute, 20 * time.Minute} {
		t0 = t0.Add(step)
		if _, err := eng.expire(t, s); err != nil {
			t.Fatal(err)
		}
		for _, e := range AllHistory(t, s, a) {
			if e.Kind == ledger.KindVoid && e.Reason == "expired" && !slices.Contains(voided, e.RequestID) {
				voided = append(voided, e.RequestID)
			}
		}
		voided = append(voided, "|")
	}
	if got := strings.Join(voided, " "); got != "short | default | long |" {
		t.Fatalf("expired at +2m, +10m, +30m: %s, want short | default | long |", got)
	}
	VerifyClean(t, s)
}

func testPurchasesIdempotentOnReference(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "buyer@example.com")
	buy := func(ref string) ledger.GrantResult {
		t.Helper()
		r, err := s.Grant(bg, ledger.GrantRequest{AccountID: a.ID, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10,
			Reference: ref, AmountCents: 200, Currency: "EUR"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := buy("cs_test_1")
	replay := buy("cs_test_1")
	if first.Repeated || !replay.Repeated || replay.Entry.Seq != first.Entry.Seq || replay.Balance.Balance != 10 {
		t.Fatalf("replayed purchase: first %+v, replay %+v", first, replay)
	}
	buy("cs_test_2")
	MustGrant(t, s, a.ID, ledger.Live, 5) // no reference: not a purchase
	if _, err := s.Grant(bg, ledger.GrantRequest{AccountID: a.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1, Reference: "INV-1"}); err != nil {
		t.Fatal(err)
	}
	MustHold(t, s, a.ID, ledger.Live, "req_1")
	if _, err := s.Settle(bg, a.ID, "req_1"); err != nil {
		t.Fatal(err)
	}
	ps, err := s.Purchases(bg, a.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Reference != "cs_test_2" || ps[1].Reference != "cs_test_1" ||
		ps[0].AmountCents != 200 || ps[0].Currency != "EUR" || ps[0].Amount != 10 {
		t.Fatalf("purchases %+v", ps)
	}
	if ps, _ := s.Purchases(bg, a.ID, 1); len(ps) != 1 || ps[0].Reference != "cs_test_2" {
		t.Fatalf("limit 1: %+v", ps)
	}
	if b := MustBalance(t, s, a.ID); b.Balance != 10+10+5+1-1 {
		t.Fatalf("balance %+v", b)
	}
	if _, err := s.Purchases(bg, "acct_nonexistent00000", 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("unknown account: %v", err)
	}
}

// testPurchase: Purchase finds an account's purchase by its reference, as Purchases lists it,
// and nothing else: not a grant or an adjustment with a reference, not another account's.
func testPurchase(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "buyer@example.com")
	other := MustAccount(t, s, "other@example.com")
	buy := func(acct, ref string, cents int64) {
		t.Helper()
		if _, err := s.Grant(bg, ledger.GrantRequest{AccountID: acct, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10,
			Reference: ref, Reason: "Stripe Checkout, package 10", AmountCents: cents, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
	}
	buy(a.ID, "cs_test_1", 200)
	buy(a.ID, "cs_test_2", 300)
	buy(other.ID, "cs_test_other", 400)
	if _, err := s.Grant(bg, ledger.GrantRequest{AccountID: a.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1, Reference: "INV-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Grant(bg, ledger.GrantRequest{AccountID: a.ID, Mode: ledger.Live, Kind: ledger.KindAdjustment, Credits: -1, Reference: "ADJ-1"}); err != nil {
		t.Fatal(err)
	}
	MustHold(t, s, a.ID, ledger.Live, "req_1")
	ps, err := s.Purchases(bg, a.ID, 0)
	if err != nil || len(ps) != 2 {
		t.Fatalf("purchases %+v %v", ps, err)
	}
	for _, want := range ps {
		got, err := s.Purchase(bg, a.ID, want.Reference)
		if err != nil {
			t.Fatalf("purchase %s: %v", want.Reference, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("purchase %s: %+v, Purchases lists %+v", want.Reference, got, want)
		}
	}
	if p, _ := s.Purchase(bg, a.ID, "cs_test_1"); p.AmountCents != 200 || p.Amount != 10 || p.Kind != ledger.KindPurchase {
		t.Fatalf("cs_test_1: %+v", p)
	}
	for _, ref := range []string{"cs_test_other", "INV-1", "ADJ-1", "req_1", "cs_test_3"} {
		_, err := s.Purchase(bg, a.ID, ref)
		WantErr(t, err, ledger.ErrNotFound)
	}
	if p, err := s.Purchase(bg, other.ID, "cs_test_other"); err != nil || p.AccountID != other.ID || p.AmountCents != 400 {
		t.Fatalf("the other account's purchase: %+v %v", p, err)
	}
	_, err = s.Purchase(bg, "acct_nonexistent00000", "cs_test_1")
	WantErr(t, err, ledger.ErrNotFound)
	for _, ref := range []string{"", strings.Repeat("x", ledger.MaxReferenceLen+1), "cs_\xff"} {
		_, err := s.Purchase(bg, a.ID, ref)
		WantErr(t, err, ledger.ErrInvalidArgument)
	}
	if _, err := s.Purchase(bg, a.ID, strings.Repeat("x", ledger.MaxReferenceLen)); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a reference of the longest length: %v", err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := s.Purchase(ctx, a.ID, "cs_test_1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: %v", err)
	}
}

func testRefillTestCredits(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "tester@example.com")
	n, b, err := s.RefillTestCredits(bg, a.ID, 50)
	if err != nil || n != 50 || b.TestAvailable != 50 || b.Balance != 0 {
		t.Fatalf("first refill: %d %+v %v", n, b, err)
	}
	if n, _, _ := s.RefillTestCredits(bg, a.ID, 50); n != 0 {
		t.Fatalf("refill when full granted %d", n)
	}
	MustHold(t, s, a.ID, ledger.Test, "req_a")
	MustHold(t, s, a.ID, ledger.Test, "req_b")
	if _, err := s.Settle(bg, a.ID, "req_a"); err != nil {
		t.Fatal(err)
	}
	// 49 balance, one open hold: 48 available, a refill adds 2.
	n, b, err = s.RefillTestCredits(bg, a.ID, 50)
	if err != nil || n != 2 || b.TestAvailable != 50 {
		t.Fatalf("second refill: %d %+v %v", n, b, err)
	}
	// Concurrent refills never overshoot.
	if _, err := s.Void(bg, a.ID, "req_b", "test"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, _, err := s.RefillTestCredits(bg, a.ID, 60); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if b := MustBalance(t, s, a.ID); b.TestAvailable != 60 || b.Available != 0 {
		t.Fatalf("after concurrent refills: %+v", b)
	}
	if ps, _ := s.Purchases(bg, a.ID, 0); len(ps) != 0 {
		t.Fatalf("a refill is listed as a purchase: %+v", ps)
	}
	rep, err := s.Verify(bg)
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	if _, _, err := s.RefillTestCredits(bg, a.ID, 0); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("target 0: %v", err)
	}
}

// testHoldNewID: a hold of an id the caller just made (HoldRequest.NewID) is a hold like any
// other, and a repeat of it while the hold is open, even after other accounts were used (a
// store that caches accounts keeps one with an open hold), reserves nothing more.
func testHoldNewID(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "newid@example.com").ID
	b := MustAccount(t, s, "newid2@example.com").ID
	MustGrant(t, s, a, ledger.Live, 2)
	MustGrant(t, s, b, ledger.Live, 1)
	req := ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "req_new1", NewID: true, KeyID: "key_test", Tool: "summarize"}
	r, err := s.Hold(bg, req) // Hold, not Reserve: the history below is read from the disk
	if err != nil || r.State != ledger.HoldOpen || r.Available != 1 || r.Repeated {
		t.Fatalf("hold of a new id: %+v %v", r, err)
	}
	entries := len(AllHistory(t, s, a))
	MustHold(t, s, b, ledger.Live, "req_other") // another account in use meanwhile
	for _, again := range []ledger.HoldRequest{req, {AccountID: a, Mode: ledger.Live, RequestID: "req_new1"}} {
		r, err := s.Hold(bg, again)
		if err != nil || !r.Repeated || r.State != ledger.HoldOpen || r.Available != 1 {
			t.Fatalf("repeat of an open hold (new id %v): %+v %v", again.NewID, r, err)
		}
	}
	if n := len(AllHistory(t, s, a)); n != entries {
		t.Fatalf("repeats wrote %d entries", n-entries)
	}
	if r, err := s.Settle(bg, a, "req_new1"); err != nil || r.State != ledger.HoldSettled || r.Repeated {
		t.Fatalf("settle: %+v %v", r, err)
	}
	if b := MustBalance(t, s, a); b.Balance != 1 || b.Available != 1 {
		t.Fatalf("balance after the settle: %+v", b)
	}
	// A hold that does not say its id is new finds the settled hold wherever it is.
	if r, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "req_new1"}); err != nil || !r.Repeated || r.State != ledger.HoldSettled {
		t.Fatalf("hold of a settled id: %+v %v", r, err)
	}
}
