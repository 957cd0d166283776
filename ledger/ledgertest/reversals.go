package ledgertest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The Reversals role: payments recorded and advanced once, refunds and disputes applied once
// per id, debt, and Verify with it. Run for every engine by the conformance suite.

// MustRecordPayment records p, failing the test on an error.
func MustRecordPayment(t testing.TB, s ledger.Store, p ledger.Payment) ledger.Payment {
	t.Helper()
	rec, _, err := s.RecordPayment(bg, p)
	if err != nil {
		t.Fatalf("record payment %s: %v", p.ID, err)
	}
	return rec
}

// MustReverse applies req, failing the test on an error.
func MustReverse(t testing.TB, s ledger.Store, req ledger.ReversalRequest) ledger.ReversalResult {
	t.Helper()
	r, err := s.Reverse(bg, req)
	if err != nil {
		t.Fatalf("%s %s (%s): %v", req.Kind, req.ID, req.Status, err)
	}
	return r
}

// BuyPaid credits a purchase of credits for cents with reference ref, paid by payment pi, as
// the webhook does: the grant, then the payment.
func BuyPaid(t testing.TB, s ledger.Store, acct, ref, pi string, credits, cents int64) {
	t.Helper()
	if _, err := s.Grant(bg, ledger.GrantRequest{AccountID: acct, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: credits,
		Reference: ref, AmountCents: cents, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}
	MustRecordPayment(t, s, ledger.Payment{ID: pi, Reference: ref, AccountID: acct, Package: "10", Credits: credits,
		AmountCents: cents, Currency: "eur", Status: ledger.PaymentPaid})
}

// spend charges n credits of the account (holds settled).
func spend(t testing.TB, s ledger.Store, acct string, n int) {
	t.Helper()
	for i := range n {
		rid := fmt.Sprintf("req_%s_%d_%d", acct[len(acct)-4:], time.Now().UnixNano(), i)
		MustHold(t, s, acct, ledger.Live, rid)
		if _, err := s.Settle(bg, acct, rid); err != nil {
			t.Fatal(err)
		}
	}
}

// Refund is a refund of cents, id, of the payment pi.
func Refund(id, pi string, cents int64) ledger.ReversalRequest {
	return ledger.ReversalRequest{ID: id, Kind: ledger.ReversalRefund, Payment: pi, AmountCents: cents, Currency: "eur",
		Status: ledger.RefundApplied, Reason: "requested_by_customer", Event: "evt_" + id}
}

// Dispute is a dispute of cents, id, of the payment pi, in status.
func Dispute(id, pi string, cents int64, status string) ledger.ReversalRequest {
	return ledger.ReversalRequest{ID: id, Kind: ledger.ReversalDispute, Payment: pi, AmountCents: cents, Currency: "eur",
		Status: status, Reason: "fraudulent", Event: "evt_" + id + "_" + status}
}

// WantFigures fails the test unless acct's live balance and available are bal and avail.
func WantFigures(t testing.TB, s ledger.Store, acct string, bal, avail int64) {
	t.Helper()
	if b := MustBalance(t, s, acct); b.Balance != bal || b.Available != avail {
		t.Fatalf("balance %d / available %d, want %d / %d", b.Balance, b.Available, bal, avail)
	}
}

// testRefundIntoDebt: buy 10, spend 3, refund fully: the balance is -3, a debt that holds
// refuse; the refund is an entry with its id and amount; repeats take nothing; a new purchase
// pays the debt (it is not refused for the debt); Verify is clean throughout.
func testRefundIntoDebt(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "debt@example.com")
	BuyPaid(t, s, a.ID, "cs_1", "pi_1", 10, 200)
	spend(t, s, a.ID, 3)
	r := MustReverse(t, s, Refund("re_1", "pi_1", 200))
	if r.Repeated || r.Entry.Kind != ledger.KindRefund || r.Entry.Amount != -10 || r.Entry.Reference != "re_1" ||
		r.Entry.AmountCents != 200 || r.Entry.BalanceAfter != -3 || r.Entry.AvailableAfter != -3 || r.Balance.Balance != -3 {
		t.Fatalf("full refund: %+v", r)
	}
	if r.Reversal.Credits != 10 || r.Reversal.Status != ledger.RefundApplied || r.Reversal.AccountID != a.ID ||
		r.Reversal.Reference != "cs_1" || r.Payment.RefundedCents != 200 || r.Payment.RefundedCredits != 10 {
		t.Fatalf("full refund's records: %+v", r)
	}
	WantFigures(t, s, a.ID, -3, -3)
	for range 3 { // Stripe delivers at least once
		if again := MustReverse(t, s, Refund("re_1", "pi_1", 200)); !again.Repeated || again.Entry.Seq != 0 || again.Balance.Balance != -3 {
			t.Fatalf("repeated refund: %+v", again)
		}
	}
	WantFigures(t, s, a.ID, -3, -3)
	_, err := s.Hold(bg, ledger.HoldRequest{AccountID: a.ID, Mode: ledger.Live, RequestID: "in_debt"})
	WantErr(t, err, ledger.ErrInsufficientCredits)
	VerifyClean(t, s)
	// An adjustment may not take more from an account in debt; a purchase pays the debt.
	_, err = s.Grant(bg, ledger.GrantRequest{AccountID: a.ID, Mode: ledger.Live, Kind: ledger.KindAdjustment, Credits: -1})
	WantErr(t, err, ledger.ErrInsufficientCredits)
	BuyPaid(t, s, a.ID, "cs_2", "pi_2", 10, 200)
	WantFigures(t, s, a.ID, 7, 7)
	MustHold(t, s, a.ID, ledger.Live, "after_debt")
	h := AllHistory(t, s, a.ID)
	var refunds int
	for _, e := range h {
		if e.Kind == ledger.KindRefund {
			refunds++
		}
	}
	if refunds != 1 {
		t.Fatalf("%d refund entries, want 1: %+v", refunds, h)
	}
	VerifyClean(t, s)
}

// testRefundSmallPurchaseAgainstDebt: a purchase smaller than the debt still credits.
func testRefundSmallPurchaseAgainstDebt(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "bigdebt@example.com")
	BuyPaid(t, s, a.ID, "cs_big", "pi_big", 50, 900)
	spend(t, s, a.ID, 13)
	MustReverse(t, s, Refund("re_big", "pi_big", 900))
	WantFigures(t, s, a.ID, -13, -13)
	BuyPaid(t, s, a.ID, "cs_small", "pi_small", 10, 200)
	WantFigures(t, s, a.ID, -3, -3)
	VerifyClean(t, s)
}

// testRefundPartialRounding: partial refunds add up, and the credits they take are the share of
// all refunded cents rounded up (operator's favour), never more than the purchase credited.
func testRefundPartialRounding(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "partial@example.com")
	BuyPaid(t, s, a.ID, "cs_p", "pi_p", 10, 200)
	for _, c := range []struct {
		id          string
		cents, took int64
	}{
		{"re_half", 100, 5}, // 1.00 of 2.00 EUR: 5 credits
		{"re_cent", 1, 1},   // 101 cents: 5.05 credits, rounded up to 6
		{"re_nine", 9, 0},   // 110 cents: 5.5, still 6
		{"re_more", 500, 4}, // more than the rest: the rest
		{"re_after", 50, 0}, // nothing left
	} {
		r := MustReverse(t, s, Refund(c.id, "pi_p", c.cents))
		if r.Repeated || r.Reversal.Credits != c.took || r.Entry.Amount != -c.took || r.Entry.Kind != ledger.KindRefund {
			t.Fatalf("refund %s of %d cents: %+v, want %d credits off", c.id, c.cents, r, c.took)
		}
	}
	WantFigures(t, s, a.ID, 0, 0)
	p, err := s.GetPayment(bg, "pi_p")
	if err != nil || p.RefundedCents != 660 || p.RefundedCredits != 10 {
		t.Fatalf("payment after the refunds: %+v %v", p, err)
	}
	VerifyClean(t, s)
}

// testRefundBeforePayment: an event for a payment not recorded (yet) is ErrNotFound and
// changes nothing; once the payment is recorded, the same event applies.
func testRefundBeforePayment(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "early@example.com")
	_, err := s.Reverse(bg, Refund("re_early", "pi_late", 200))
	WantErr(t, err, ledger.ErrNotFound)
	_, err = s.Reverse(bg, Dispute("du_early", "pi_late", 200, ledger.DisputeOpen))
	WantErr(t, err, ledger.ErrNotFound)
	if rs, err := s.ListReversals(bg, "", "", 0); err != nil || len(rs) != 0 {
		t.Fatalf("reversals after refused events: %+v %v", rs, err)
	}
	BuyPaid(t, s, a.ID, "cs_late", "pi_late", 10, 200)
	if r := MustReverse(t, s, Refund("re_early", "pi_late", 200)); r.Entry.Amount != -10 {
		t.Fatalf("the retried refund: %+v", r)
	}
	WantFigures(t, s, a.ID, 0, 0)
	VerifyClean(t, s)
}

// testRefundConcurrent: one refund event delivered many times at once applies once.
func testRefundConcurrent(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "race@example.com")
	BuyPaid(t, s, a.ID, "cs_r", "pi_r", 10, 200)
	var wg sync.WaitGroup
	var mu sync.Mutex
	applied := 0
	for range 12 {
		wg.Go(func() {
			r, err := s.Reverse(bg, Refund("re_r", "pi_r", 100))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !r.Repeated {
				applied++
			}
		})
	}
	wg.Wait()
	if applied != 1 {
		t.Fatalf("applied %d times, want once", applied)
	}
	WantFigures(t, s, a.ID, 5, 5)
	VerifyClean(t, s)
}

// testRefundFailed: a refund that fails gives its credits back, once; one that failed before
// its creation arrived takes nothing.
func testRefundFailed(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "failed@example.com")
	BuyPaid(t, s, a.ID, "cs_f", "pi_f", 10, 200)
	MustReverse(t, s, Refund("re_f", "pi_f", 200))
	WantFigures(t, s, a.ID, 0, 0)
	failed := Refund("re_f", "pi_f", 200)
	failed.Status = ledger.RefundFailed
	r := MustReverse(t, s, failed)
	if r.Repeated || r.Entry.Amount != 10 || r.Entry.Reference != "re_f/failed" || r.Reversal.Status != ledger.RefundFailed || r.Reversal.Credits != 0 {
		t.Fatalf("failed refund: %+v", r)
	}
	if r := MustReverse(t, s, failed); !r.Repeated {
		t.Fatalf("failed again: %+v", r)
	}
	if r := MustReverse(t, s, Refund("re_f", "pi_f", 200)); !r.Repeated {
		t.Fatalf("the refund's creation after its failure: %+v", r)
	}
	WantFigures(t, s, a.ID, 10, 10)
	early := Refund("re_g", "pi_f", 200)
	early.Status = ledger.RefundFailed
	if r := MustReverse(t, s, early); r.Repeated || r.Entry.Seq != 0 || r.Reversal.Status != ledger.RefundFailed {
		t.Fatalf("a failure before the refund: %+v", r)
	}
	if r := MustReverse(t, s, Refund("re_g", "pi_f", 200)); !r.Repeated {
		t.Fatalf("the refund's creation after its failure: %+v", r)
	}
	WantFigures(t, s, a.ID, 10, 10)
	if p, _ := s.GetPayment(bg, "pi_f"); p.RefundedCents != 0 || p.RefundedCredits != 0 {
		t.Fatalf("payment after the failed refunds: %+v", p)
	}
	VerifyClean(t, s)
}

// testDisputes: a dispute freezes the purchase's credits (taken off, into debt if spent); won
// gives them back; lost is final and recorded; each step once, in any order.
func testDisputes(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "dispute@example.com")
	BuyPaid(t, s, a.ID, "cs_d1", "pi_d1", 10, 200)
	BuyPaid(t, s, a.ID, "cs_d2", "pi_d2", 10, 200)
	spend(t, s, a.ID, 12)
	WantFigures(t, s, a.ID, 8, 8)

	// Won: frozen, then given back.
	r := MustReverse(t, s, Dispute("du_1", "pi_d1", 200, ledger.DisputeOpen))
	if r.Entry.Kind != ledger.KindDispute || r.Entry.Amount != -10 || r.Entry.Reference != "du_1" || r.Reversal.Status != ledger.DisputeOpen ||
		r.Reversal.Reason != "fraudulent" || r.Payment.DisputedCredits != 10 {
		t.Fatalf("dispute opened: %+v", r)
	}
	WantFigures(t, s, a.ID, -2, -2)
	_, err := s.Hold(bg, ledger.HoldRequest{AccountID: a.ID, Mode: ledger.Live, RequestID: "frozen"})
	WantErr(t, err, ledger.ErrInsufficientCredits)
	if r := MustReverse(t, s, Dispute("du_1", "pi_d1", 200, ledger.DisputeOpen)); !r.Repeated {
		t.Fatalf("dispute opened again: %+v", r)
	}
	VerifyClean(t, s)
	r = MustReverse(t, s, Dispute("du_1", "pi_d1", 200, ledger.DisputeWon))
	if r.Entry.Amount != 10 || r.Entry.Reference != "du_1/won" || r.Reversal.Status != ledger.DisputeWon || r.Reversal.Credits != 0 {
		t.Fatalf("dispute won: %+v", r)
	}
	WantFigures(t, s, a.ID, 8, 8)
	for _, st := range []string{ledger.DisputeWon, ledger.DisputeLost, ledger.DisputeOpen} {
		if r := MustReverse(t, s, Dispute("du_1", "pi_d1", 200, st)); !r.Repeated {
			t.Fatalf("%s after won: %+v", st, r)
		}
	}
	WantFigures(t, s, a.ID, 8, 8)

	// Lost: frozen, then final, with an entry of 0.
	MustReverse(t, s, Dispute("du_2", "pi_d2", 200, ledger.DisputeOpen))
	WantFigures(t, s, a.ID, -2, -2)
	r = MustReverse(t, s, Dispute("du_2", "pi_d2", 200, ledger.DisputeLost))
	if r.Repeated || r.Entry.Kind != ledger.KindDispute || r.Entry.Amount != 0 || r.Entry.Reference != "du_2/lost" || r.Reversal.Credits != 10 {
		t.Fatalf("dispute lost: %+v", r)
	}
	if r := MustReverse(t, s, Dispute("du_2", "pi_d2", 200, ledger.DisputeWon)); !r.Repeated {
		t.Fatalf("won after lost: %+v", r)
	}
	WantFigures(t, s, a.ID, -2, -2)
	VerifyClean(t, s)

	// Out of order: closed before created.
	BuyPaid(t, s, a.ID, "cs_d3", "pi_d3", 10, 200)
	BuyPaid(t, s, a.ID, "cs_d4", "pi_d4", 10, 200)
	WantFigures(t, s, a.ID, 18, 18)
	r = MustReverse(t, s, Dispute("du_3", "pi_d3", 200, ledger.DisputeLost))
	if r.Entry.Amount != -10 || r.Reversal.Status != ledger.DisputeLost {
		t.Fatalf("lost before created: %+v", r)
	}
	if r := MustReverse(t, s, Dispute("du_3", "pi_d3", 200, ledger.DisputeOpen)); !r.Repeated {
		t.Fatalf("created after lost: %+v", r)
	}
	r = MustReverse(t, s, Dispute("du_4", "pi_d4", 200, ledger.DisputeWon))
	if r.Entry.Seq != 0 || r.Reversal.Status != ledger.DisputeWon || r.Reversal.Credits != 0 {
		t.Fatalf("won before created: %+v", r)
	}
	if r := MustReverse(t, s, Dispute("du_4", "pi_d4", 200, ledger.DisputeOpen)); !r.Repeated {
		t.Fatalf("created after won: %+v", r)
	}
	WantFigures(t, s, a.ID, 8, 8)

	// A refund and a dispute of one purchase never take more than it credited.
	BuyPaid(t, s, a.ID, "cs_d5", "pi_d5", 10, 200)
	MustReverse(t, s, Refund("re_5", "pi_d5", 100))
	if r := MustReverse(t, s, Dispute("du_5", "pi_d5", 200, ledger.DisputeOpen)); r.Entry.Amount != -5 {
		t.Fatalf("dispute of a half-refunded purchase: %+v", r)
	}
	WantFigures(t, s, a.ID, 8, 8)

	ds, err := s.ListReversals(bg, a.ID, ledger.ReversalDispute, 0)
	if err != nil || len(ds) != 5 {
		t.Fatalf("disputes: %+v %v", ds, err)
	}
	if all, _ := s.ListReversals(bg, "", "", 0); len(all) != 6 || all[0].ID != "du_5" {
		t.Fatalf("all reversals, last changed first: %+v", all)
	}
	if one, _ := s.ListReversals(bg, "", "", 1); len(one) != 1 {
		t.Fatalf("limit 1: %+v", one)
	}
	VerifyClean(t, s)
}

// testPayments: a payment moves from pending to paid or failed once and then never changes;
// an account's payments are listed newest first; a payment that credited nothing (no account)
// takes refunds without an entry.
func testPayments(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	a := MustAccount(t, s, "pay@example.com")
	pend := ledger.Payment{ID: "pi_async", Reference: "cs_async", AccountID: a.ID, Package: "10", AmountCents: 200, Currency: "eur", Status: ledger.PaymentPending}
	rec, repeated, err := s.RecordPayment(bg, pend)
	if err != nil || repeated || rec.Status != ledger.PaymentPending || !rec.Created.Equal(clock) {
		t.Fatalf("pending: %+v %v %v", rec, repeated, err)
	}
	if _, repeated, _ := s.RecordPayment(bg, pend); !repeated {
		t.Fatal("pending again: not repeated")
	}
	clock = clock.Add(time.Minute)
	paid := pend
	paid.Status, paid.Credits = ledger.PaymentPaid, 10
	rec, repeated, err = s.RecordPayment(bg, paid)
	if err != nil || repeated || rec.Status != ledger.PaymentPaid || rec.Credits != 10 || !rec.Created.Equal(clock.Add(-time.Minute)) || !rec.Updated.Equal(clock) {
		t.Fatalf("paid: %+v %v %v", rec, repeated, err)
	}
	for _, st := range []ledger.PaymentStatus{ledger.PaymentPending, ledger.PaymentFailed} {
		late := pend
		late.Status = st
		if got, repeated, err := s.RecordPayment(bg, late); err != nil || !repeated || got != rec {
			t.Fatalf("%s after paid: %+v %v %v", st, got, repeated, err)
		}
	}
	clock = clock.Add(time.Minute)
	failed := ledger.Payment{ID: "pi_fail", Reference: "cs_fail", AccountID: a.ID, AmountCents: 200, Currency: "eur", Status: ledger.PaymentPending}
	MustRecordPayment(t, s, failed)
	failed.Status = ledger.PaymentFailed
	if got := MustRecordPayment(t, s, failed); got.Status != ledger.PaymentFailed {
		t.Fatalf("failed: %+v", got)
	}
	ps, err := s.AccountPayments(bg, a.ID, 0)
	if err != nil || len(ps) != 2 || ps[0].ID != "pi_fail" || ps[1].ID != "pi_async" {
		t.Fatalf("account payments: %+v %v", ps, err)
	}
	if ps, err := s.AccountPayments(bg, "acct_nobodynobodynobo", 0); err != nil || len(ps) != 0 {
		t.Fatalf("payments of no account: %+v %v", ps, err)
	}
	_, err = s.GetPayment(bg, "pi_none")
	WantErr(t, err, ledger.ErrNotFound)
	if p, err := s.PaymentOf(bg, "cs_async"); err != nil || p.ID != "pi_async" || p.Status != ledger.PaymentPaid {
		t.Fatalf("payment of cs_async: %+v %v", p, err)
	}
	_, err = s.PaymentOf(bg, "cs_none")
	WantErr(t, err, ledger.ErrNotFound)

	// A paid session that credited nothing, for no account: its refund is kept, with no entry.
	MustRecordPayment(t, s, ledger.Payment{ID: "pi_unmatched", Reference: "cs_unmatched", AmountCents: 150, Currency: "eur", Status: ledger.PaymentPaid})
	r := MustReverse(t, s, Refund("re_unmatched", "pi_unmatched", 150))
	if r.Repeated || r.Entry.Seq != 0 || r.Reversal.Credits != 0 || r.Reversal.Status != ledger.RefundApplied {
		t.Fatalf("refund of a payment that credited nothing: %+v", r)
	}
	VerifyClean(t, s)
}

// testReversalsInvalid: bad requests are refused and change nothing.
func testReversalsInvalid(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "bad@example.com")
	BuyPaid(t, s, a.ID, "cs_b", "pi_b", 10, 200)
	good := Refund("re_b", "pi_b", 100)
	for name, mut := range map[string]func(*ledger.ReversalRequest){
		"no id":           func(r *ledger.ReversalRequest) { r.ID = "" },
		"no payment":      func(r *ledger.ReversalRequest) { r.Payment = "" },
		"negative amount": func(r *ledger.ReversalRequest) { r.AmountCents = -1 },
		"unknown kind":    func(r *ledger.ReversalRequest) { r.Kind = "chargeback" },
		"refund won":      func(r *ledger.ReversalRequest) { r.Status = ledger.DisputeWon },
		"dispute applied": func(r *ledger.ReversalRequest) { r.Kind = ledger.ReversalDispute },
		"not UTF-8":       func(r *ledger.ReversalRequest) { r.Reason = "\xff" },
	} {
		req := good
		mut(&req)
		if _, err := s.Reverse(bg, req); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	MustReverse(t, s, good)
	if _, err := s.Reverse(bg, Dispute("re_b", "pi_b", 100, ledger.DisputeOpen)); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Errorf("a refund's id as a dispute's: %v", err)
	}
	for name, p := range map[string]ledger.Payment{
		"no id":            {Reference: "cs", Currency: "eur", Status: ledger.PaymentPaid},
		"no reference":     {ID: "pi", Currency: "eur", Status: ledger.PaymentPaid},
		"no currency":      {ID: "pi", Reference: "cs", Status: ledger.PaymentPaid},
		"bad status":       {ID: "pi", Reference: "cs", Currency: "eur", Status: "refunded"},
		"pending credited": {ID: "pi", Reference: "cs", Currency: "eur", Status: ledger.PaymentPending, Credits: 1},
		"negative":         {ID: "pi", Reference: "cs", Currency: "eur", Status: ledger.PaymentPaid, AmountCents: -1},
	} {
		if _, _, err := s.RecordPayment(bg, p); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Errorf("payment with %s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := s.ListReversals(bg, "", "chargeback", 0); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Errorf("list of an unknown kind: %v", err)
	}
	WantFigures(t, s, a.ID, 5, 5)
	VerifyClean(t, s)
}
