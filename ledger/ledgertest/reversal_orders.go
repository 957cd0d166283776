package ledgertest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// The orders of one purchase's refund and dispute events, in one table: a purchase never gives
// back more than it paid for minus what was refunded, whatever the order of its events (before,
// during or after a dispute; partial; won, lost, or an inquiry closed; delivered again). Run for
// every engine by the conformance suite.

// refundFailed is refund id's failure (the provider's failed or canceled).
func refundFailed(id, pi string, cents int64) ledger.ReversalRequest {
	r := Refund(id, pi, cents)
	r.Status = ledger.RefundFailed
	return r
}

// testReversalOrders: a purchase of 10 credits for 2.00 EUR, some of them spent, then each
// row's events in order. After every event the account keeps at most what the purchase paid for
// less what the refunds applied so far returned (rounded in the operator's favour, as
// creditsFor does); after the last, exactly what the row says; then every event delivered again
// changes nothing, and Verify is clean.
func testReversalOrders(t *testing.T, eng engine) {
	const credits, cents = 10, 200
	type ev = func(pi string) ledger.ReversalRequest // ids are made unique by the row's payment id
	ref := func(id string, c int64) ev {
		return func(pi string) ledger.ReversalRequest { return Refund(id, pi, c) }
	}
	refFail := func(id string, c int64) ev {
		return func(pi string) ledger.ReversalRequest { return refundFailed(id, pi, c) }
	}
	dis := func(id string, c int64, st string) ev {
		return func(pi string) ledger.ReversalRequest { return Dispute(id, pi, c, st) }
	}
	// An inquiry (Stripe's warning_needs_response) opens as a dispute; closed as
	// warning_closed, it is won (the webhook's disputeReversal).
	inquiry := func(id string, c int64) ev { return dis(id, c, ledger.DisputeOpen) }
	warningClosed := func(id string, c int64) ev { return dis(id, c, ledger.DisputeWon) }
	rows := []struct {
		name   string
		spent  int64
		events []ev
		keep   int64 // the credits the purchase still gives at the end
	}{
		{"refund in full", 0, []ev{ref("re_a", 200)}, 0},
		{"refund of half", 0, []ev{ref("re_a", 100)}, 5},
		{"partial refunds add up, rounded once", 0, []ev{ref("re_a", 50), ref("re_b", 50), ref("re_c", 1)}, 4},
		{"refunds beyond the charge", 0, []ev{ref("re_a", 150), ref("re_b", 150)}, 0},
		{"refund failed", 0, []ev{ref("re_a", 200), refFail("re_a", 200)}, 10},
		{"refund failed before its creation", 0, []ev{refFail("re_a", 200), ref("re_a", 200)}, 10},
		{"dispute won", 0, []ev{dis("du_a", 200, ledger.DisputeOpen), dis("du_a", 200, ledger.DisputeWon)}, 10},
		{"dispute lost", 0, []ev{dis("du_a", 200, ledger.DisputeOpen), dis("du_a", 200, ledger.DisputeLost)}, 0},
		{"dispute lost before its creation", 0, []ev{dis("du_a", 200, ledger.DisputeLost), dis("du_a", 200, ledger.DisputeOpen)}, 0},
		{"dispute won before its creation, then a refund", 0,
			[]ev{dis("du_a", 200, ledger.DisputeWon), dis("du_a", 200, ledger.DisputeOpen), ref("re_a", 200)}, 0},
		{"inquiry, full refund, warning_closed", 0,
			[]ev{inquiry("du_a", 200), ref("re_a", 200), warningClosed("du_a", 200)}, 0},
		{"inquiry, partial refund, warning_closed", 0,
			[]ev{inquiry("du_a", 200), ref("re_a", 50), warningClosed("du_a", 200)}, 7},
		{"inquiry, two partial refunds, warning_closed", 0,
			[]ev{inquiry("du_a", 200), ref("re_a", 100), ref("re_b", 100), warningClosed("du_a", 200)}, 0},
		{"refund during a dispute, lost", 0,
			[]ev{dis("du_a", 200, ledger.DisputeOpen), ref("re_a", 200), dis("du_a", 200, ledger.DisputeLost)}, 0},
		{"refund during a dispute, failed, won", 0,
			[]ev{dis("du_a", 200, ledger.DisputeOpen), ref("re_a", 200), refFail("re_a", 200), dis("du_a", 200, ledger.DisputeWon)}, 10},
		{"refund during a dispute, won, then the refund failed", 0,
			[]ev{dis("du_a", 200, ledger.DisputeOpen), ref("re_a", 200), dis("du_a", 200, ledger.DisputeWon), refFail("re_a", 200)}, 10},
		{"partial refund during a dispute, failed, lost", 0,
			[]ev{dis("du_a", 200, ledger.DisputeOpen), ref("re_a", 100), refFail("re_a", 100), dis("du_a", 200, ledger.DisputeLost)}, 0},
		{"refund before a dispute of the rest, won", 0,
			[]ev{ref("re_a", 100), dis("du_a", 100, ledger.DisputeOpen), dis("du_a", 100, ledger.DisputeWon)}, 5},
		{"refund before a dispute of the rest, lost", 0,
			[]ev{ref("re_a", 100), dis("du_a", 100, ledger.DisputeOpen), dis("du_a", 100, ledger.DisputeLost)}, 0},
		{"refund before a dispute of the whole, won", 0,
			[]ev{ref("re_a", 100), dis("du_a", 200, ledger.DisputeOpen), dis("du_a", 200, ledger.DisputeWon)}, 5},
		{"refund after a won dispute", 0,
			[]ev{dis("du_a", 200, ledger.DisputeOpen), dis("du_a", 200, ledger.DisputeWon), ref("re_a", 100)}, 5},
		{"refund after a lost dispute", 0,
			[]ev{dis("du_a", 200, ledger.DisputeOpen), dis("du_a", 200, ledger.DisputeLost), ref("re_a", 200)}, 0},
		{"refund after a partial lost dispute", 0,
			[]ev{dis("du_a", 100, ledger.DisputeOpen), dis("du_a", 100, ledger.DisputeLost), ref("re_a", 100)}, 0},
		{"refund failed after a lost dispute", 0,
			[]ev{ref("re_a", 100), dis("du_a", 100, ledger.DisputeOpen), dis("du_a", 100, ledger.DisputeLost), refFail("re_a", 100)}, 5},
		{"two disputes, one won, one lost", 0,
			[]ev{dis("du_a", 100, ledger.DisputeOpen), dis("du_b", 100, ledger.DisputeOpen), dis("du_a", 100, ledger.DisputeWon), dis("du_b", 100, ledger.DisputeLost)}, 5},
		{"two disputes won, a refund between", 0,
			[]ev{dis("du_a", 100, ledger.DisputeOpen), ref("re_a", 100), dis("du_b", 100, ledger.DisputeOpen),
				dis("du_a", 100, ledger.DisputeWon), dis("du_b", 100, ledger.DisputeWon)}, 5},
		{"a spent purchase: inquiry, full refund, warning_closed", 4,
			[]ev{inquiry("du_a", 200), ref("re_a", 200), warningClosed("du_a", 200)}, 0},
		{"a spent purchase: dispute won, partial refund", 4,
			[]ev{dis("du_a", 200, ledger.DisputeOpen), ref("re_a", 60), dis("du_a", 200, ledger.DisputeWon)}, 7},
	}
	s := eng.open(t, 0)
	for i, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			a := MustAccount(t, s, fmt.Sprintf("order%d@example.com", i))
			pi := fmt.Sprintf("pi_order_%d", i)
			BuyPaid(t, s, a.ID, fmt.Sprintf("cs_order_%d", i), pi, credits, cents)
			spend(t, s, a.ID, int(row.spent))
			refunded := map[string]int64{} // the refunds applied and not failed, by id
			for _, e := range row.events {
				req := e(pi)
				req.ID += "_" + pi
				r := MustReverse(t, s, req)
				if req.Kind == ledger.ReversalRefund && !r.Repeated {
					if req.Status == ledger.RefundApplied {
						refunded[req.ID] = req.AmountCents
					} else {
						delete(refunded, req.ID)
					}
				}
				var back int64
				for _, c := range refunded {
					back += c
				}
				most := credits - min((back*credits+cents-1)/cents, credits) - row.spent
				if b := MustBalance(t, s, a.ID); b.Balance > most {
					t.Fatalf("after %s %s (%s): balance %d, more than the %d that the purchase paid for less what %d cents refunded leave",
						req.Kind, req.ID, req.Status, b.Balance, most, back)
				}
			}
			want := row.keep - row.spent
			WantFigures(t, s, a.ID, want, want)
			p, err := s.GetPayment(bg, pi)
			if err != nil || p.RefundedCredits+p.DisputedCredits != credits-row.keep {
				t.Fatalf("payment: %+v %v, want %d credits taken", p, err, credits-row.keep)
			}
			for _, e := range row.events { // Stripe delivers at least once
				req := e(pi)
				req.ID += "_" + pi
				if r := MustReverse(t, s, req); !r.Repeated || r.Entry.Seq != 0 {
					t.Fatalf("%s %s (%s) delivered again: %+v", req.Kind, req.ID, req.Status, r)
				}
			}
			WantFigures(t, s, a.ID, want, want)
		})
	}
	VerifyClean(t, s)
}

// testReversalOfPendingPayment: a refund or dispute of a payment still pending (its success
// not arrived yet: Stripe does not promise the order) is not applied (ErrNotFound: the webhook
// answers 500 and Stripe delivers it again); once the payment succeeded and its purchase is
// credited, the event delivered again takes its share.
func testReversalOfPendingPayment(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "pending@example.com")
	pend := ledger.Payment{ID: "pi_pend", Reference: "cs_pend", AccountID: a.ID, Package: "10", AmountCents: 200, Currency: "eur",
		Status: ledger.PaymentPending}
	MustRecordPayment(t, s, pend)
	early := []ledger.ReversalRequest{Refund("re_pend", "pi_pend", 200), Dispute("du_pend", "pi_pend", 200, ledger.DisputeOpen)}
	for _, req := range early {
		if _, err := s.Reverse(bg, req); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("%s %s of a pending payment: %v, want ErrNotFound", req.Kind, req.ID, err)
		}
	}
	if rs, err := s.ListReversals(bg, a.ID, "", 0); err != nil || len(rs) != 0 {
		t.Errorf("reversals of a pending payment: %+v %v", rs, err)
	}
	BuyPaid(t, s, a.ID, "cs_pend", "pi_pend", 10, 200) // the success: credited, then paid
	WantFigures(t, s, a.ID, 10, 10)
	for _, req := range early {
		if r := MustReverse(t, s, req); r.Repeated {
			t.Fatalf("%s %s after the success: %+v", req.Kind, req.ID, r)
		}
	}
	MustReverse(t, s, Dispute("du_pend", "pi_pend", 200, ledger.DisputeWon))
	WantFigures(t, s, a.ID, 0, 0)
	VerifyClean(t, s)
}
