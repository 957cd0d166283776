package account

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// Refunds, disputes and delayed payments through the webhook, with payloads shaped as Stripe
// sends them and signed with stripe-go's test helper.

var eventSeq atomic.Int64

// stripeEventOf is a Stripe event of evType carrying obj.
func stripeEventOf(evType string, obj map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": fmt.Sprintf("evt_test_%d", eventSeq.Add(1)), "object": "event", "api_version": stripe.APIVersion,
		"created": time.Now().Unix(), "livemode": false, "type": evType, "data": map[string]any{"object": obj},
	})
	return b
}

// refundObject is a Refund of pi.
func refundObject(id, pi string, amount int64, status string) map[string]any {
	return map[string]any{"id": id, "object": "refund", "amount": amount, "currency": "eur", "payment_intent": pi,
		"charge": "ch_of_" + pi, "status": status, "reason": "requested_by_customer"}
}

func refundEvent(evType, id, pi string, amount int64, status string) []byte {
	return stripeEventOf(evType, refundObject(id, pi, amount, status))
}

// chargeRefundedEvent is charge.refunded of pi's charge listing refunds (as API versions before
// 2022-11-15 send it).
func chargeRefundedEvent(pi string, amount int64, refunds ...map[string]any) []byte {
	var refunded int64
	for _, r := range refunds {
		refunded += r["amount"].(int64)
	}
	ch := map[string]any{"id": "ch_of_" + pi, "object": "charge", "amount": amount, "amount_refunded": refunded,
		"currency": "eur", "refunded": refunded == amount, "status": "succeeded",
		"refunds": map[string]any{"object": "list", "data": refunds, "has_more": false, "url": "/v1/refunds"}}
	if pi != "" {
		ch["payment_intent"] = pi
	}
	return stripeEventOf("charge.refunded", ch)
}

func disputeEvent(evType, id, pi string, amount int64, status string) []byte {
	return stripeEventOf(evType, map[string]any{"id": id, "object": "dispute", "amount": amount, "currency": "eur",
		"charge": "ch_of_" + pi, "payment_intent": pi, "reason": "fraudulent", "status": status})
}

// hook delivers payload to env's webhook, signed, and checks the answer.
func hook(t *testing.T, e *testEnv, payload []byte, status int, reply string) {
	t.Helper()
	got, body := deliver(t, e.srv.URL+"/account/stripe/webhook", payload, testWebhookSecret, time.Now())
	if got != status || !strings.Contains(body, reply) {
		t.Fatalf("webhook: %d %s, want %d with %q", got, strings.TrimSpace(body), status, reply)
	}
}

// buyThrough pays a Checkout Session of package "10" (10 credits, 2.00 EUR) through the webhook.
func buyThrough(t *testing.T, e *testEnv, acct, session string) {
	t.Helper()
	hook(t, e, checkoutEvent("checkout.session.completed", session, acct, "paid", "10", 200), 200, "credited")
}

func wantBalance(t *testing.T, s ledger.Store, acct string, bal, avail int64) {
	t.Helper()
	b, err := s.Balance(bg, acct)
	if err != nil || b.Balance != bal || b.Available != avail {
		t.Fatalf("balance %+v %v, want %d / %d", b, err, bal, avail)
	}
}

func verifyOK(t *testing.T, s ledger.Store) {
	t.Helper()
	if rep, err := s.Verify(bg); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// TestWebhookRefundIntoDebt: buy 10, spend 3, refund fully (charge.refunded): the balance is -3,
// a debt no hold can spend into; the same refund again (also as refund.updated) takes nothing;
// buying again pays the debt: 7. The refund is an entry with its id and amount; verify is clean.
func TestWebhookRefundIntoDebt(t *testing.T) {
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret))
	acct, _ := e.store.CreateAccount(bg, "debtor@example.com")
	buyThrough(t, e, acct.ID, "cs_test_debt1")
	for i := range 3 {
		requestOn(t, e.store, acct.ID, fmt.Sprintf("req_%d", i), "summarize", ledger.Live, true)
	}
	pi := paymentIntentOf("cs_test_debt1")
	full := chargeRefundedEvent(pi, 200, refundObject("re_test_full", pi, 200, "succeeded"))
	hook(t, e, full, 200, "refund applied")
	wantBalance(t, e.store, acct.ID, -3, -3)
	hook(t, e, full, 200, "duplicate")
	hook(t, e, refundEvent("refund.updated", "re_test_full", pi, 200, "succeeded"), 200, "duplicate")
	wantBalance(t, e.store, acct.ID, -3, -3)
	if _, err := e.store.Hold(bg, ledger.HoldRequest{AccountID: acct.ID, Mode: ledger.Live, RequestID: "in_debt"}); err != ledger.ErrInsufficientCredits {
		t.Fatalf("a hold in debt: %v", err)
	}
	h, _, _ := e.store.History(bg, acct.ID, ledger.Page{Limit: 1})
	if len(h) != 1 || h[0].Kind != ledger.KindRefund || h[0].Reference != "re_test_full" || h[0].Amount != -10 || h[0].AmountCents != 200 {
		t.Fatalf("the refund's entry: %+v", h)
	}
	buyThrough(t, e, acct.ID, "cs_test_debt2")
	wantBalance(t, e.store, acct.ID, 7, 7)
	verifyOK(t, e.store)
}

// TestWebhookRefundFaults: the defined outcome of each bad or unlucky refund event.
func TestWebhookRefundFaults(t *testing.T) {
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret))
	acct, _ := e.store.CreateAccount(bg, "faults@example.com")

	// Before its purchase: 500 (Stripe retries), nothing taken; after the purchase, the retry applies.
	early := refundEvent("refund.created", "re_test_early", paymentIntentOf("cs_test_early"), 200, "succeeded")
	hook(t, e, early, 500, "unknown payment")
	buyThrough(t, e, acct.ID, "cs_test_early")
	wantBalance(t, e.store, acct.ID, 10, 10)
	hook(t, e, early, 200, "refund applied")
	wantBalance(t, e.store, acct.ID, 0, 0)

	// A refund that fails gives the credits back, once.
	failed := refundEvent("refund.failed", "re_test_early", paymentIntentOf("cs_test_early"), 200, "failed")
	hook(t, e, failed, 200, "refund failed")
	hook(t, e, failed, 200, "duplicate")
	wantBalance(t, e.store, acct.ID, 10, 10)

	// Larger than the purchase: its credits, not more.
	buyThrough(t, e, acct.ID, "cs_test_big")
	hook(t, e, refundEvent("refund.created", "re_test_big", paymentIntentOf("cs_test_big"), 5000, "pending"), 200, "refund applied")
	wantBalance(t, e.store, acct.ID, 10, 10)

	// A charge of no purchase (no payment intent: not made by Checkout), a forged signature.
	hook(t, e, chargeRefundedEvent("", 500, refundObject("re_test_foreign", "", 500, "succeeded")), 200, "of no purchase")
	forged := refundEvent("refund.created", "re_test_forged", paymentIntentOf("cs_test_big"), 200, "succeeded")
	if status, _ := deliver(t, e.srv.URL+"/account/stripe/webhook", forged, "whsec_wrong", time.Now()); status != 400 {
		t.Fatalf("forged refund: %d", status)
	}
	// A paid session that credited nothing (paid too little): its refund is kept, takes nothing.
	hook(t, e, checkoutEvent("checkout.session.completed", "cs_test_cheap", acct.ID, "paid", "10", 150), 200, "amount differs")
	hook(t, e, refundEvent("refund.created", "re_test_cheap", paymentIntentOf("cs_test_cheap"), 150, "succeeded"), 200, "refund applied")
	wantBalance(t, e.store, acct.ID, 10, 10)
	rs, _ := e.store.ListReversals(bg, "", ledger.ReversalRefund, 0)
	if len(rs) != 3 {
		t.Fatalf("refunds kept: %+v", rs)
	}
	verifyOK(t, e.store)
}

// TestWebhookRefundLedgerDown: a refund the ledger cannot take is answered 500, and Stripe's
// retry applies it once the ledger is back.
func TestWebhookRefundLedgerDown(t *testing.T) {
	dir := t.TempDir()
	opts := badgerledger.Options{SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1}
	store, err := badgerledger.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	acct, _ := store.CreateAccount(bg, "down@example.com")
	e := newTestEnvOn(t, store, withStripe("http://127.0.0.1:1", testWebhookSecret))
	buyThrough(t, e, acct.ID, "cs_test_down")
	payload := refundEvent("refund.created", "re_test_down", paymentIntentOf("cs_test_down"), 100, "succeeded")
	store.Close()
	hook(t, e, payload, 500, "ledger error")
	store2, err := badgerledger.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer store2.Close()
	e2 := newTestEnvOn(t, store2, withStripe("http://127.0.0.1:1", testWebhookSecret))
	hook(t, e2, payload, 200, "refund applied")
	hook(t, e2, payload, 200, "duplicate")
	wantBalance(t, store2, acct.ID, 5, 5)
}

// TestWebhookPartialRefundTwoInstances: a partial refund of 1.00 EUR of 2.00 EUR takes 5 credits,
// once, with the event delivered 5 times at once to two instances sharing a PostgreSQL ledger.
func TestWebhookPartialRefundTwoInstances(t *testing.T) {
	open := postgresOpener(t, pgtest.NewDatabase(t))
	a := newTestEnvOn(t, open(), withStripe("http://127.0.0.1:1", testWebhookSecret))
	b := newTestEnvOn(t, open(), withStripe("http://127.0.0.1:1", testWebhookSecret))
	acct, _ := a.store.CreateAccount(bg, "partial@example.com")
	buyThrough(t, a, acct.ID, "cs_test_partial")
	payload := refundEvent("refund.created", "re_test_partial", paymentIntentOf("cs_test_partial"), 100, "succeeded")
	var wg sync.WaitGroup
	var mu sync.Mutex
	replies := map[string]int{}
	for i := range 5 {
		env := []*testEnv{a, b}[i%2]
		wg.Go(func() {
			status, body := deliver(t, env.srv.URL+"/account/stripe/webhook", payload, testWebhookSecret, time.Now())
			mu.Lock()
			replies[fmt.Sprintf("%d %s", status, strings.TrimSpace(body))]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if replies[`200 {"status":"refund applied"}`] != 1 || replies[`200 {"status":"duplicate: refund applied before"}`] != 4 {
		t.Fatalf("replies %v, want one applied and four duplicates", replies)
	}
	wantBalance(t, b.store, acct.ID, 5, 5)
	h, _, _ := b.store.History(bg, acct.ID, ledger.Page{})
	refunds := 0
	for _, en := range h {
		if en.Kind == ledger.KindRefund {
			refunds++
		}
	}
	if refunds != 1 {
		t.Fatalf("%d refund entries: %+v", refunds, h)
	}
	verifyOK(t, a.store)
}

// TestWebhookDisputes: created freezes the purchase's credits; closed won gives them back; lost
// is final; a close that arrives before the creation is applied as such; repeats change nothing.
func TestWebhookDisputes(t *testing.T) {
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret))
	acct, _ := e.store.CreateAccount(bg, "disputed@example.com")
	buyThrough(t, e, acct.ID, "cs_test_d1")
	buyThrough(t, e, acct.ID, "cs_test_d2")
	pi1, pi2 := paymentIntentOf("cs_test_d1"), paymentIntentOf("cs_test_d2")

	created := disputeEvent("charge.dispute.created", "du_test_1", pi1, 200, "needs_response")
	hook(t, e, created, 200, "dispute open")
	hook(t, e, created, 200, "duplicate")
	wantBalance(t, e.store, acct.ID, 10, 10)
	hook(t, e, disputeEvent("charge.dispute.closed", "du_test_1", pi1, 200, "won"), 200, "dispute won")
	hook(t, e, disputeEvent("charge.dispute.closed", "du_test_1", pi1, 200, "won"), 200, "duplicate")
	wantBalance(t, e.store, acct.ID, 20, 20)

	hook(t, e, disputeEvent("charge.dispute.created", "du_test_2", pi2, 200, "needs_response"), 200, "dispute open")
	hook(t, e, disputeEvent("charge.dispute.closed", "du_test_2", pi2, 200, "lost"), 200, "dispute lost")
	hook(t, e, disputeEvent("charge.dispute.closed", "du_test_2", pi2, 200, "won"), 200, "duplicate")
	wantBalance(t, e.store, acct.ID, 10, 10)

	// Closed before created; an inquiry closed; a close in a state that changes nothing.
	buyThrough(t, e, acct.ID, "cs_test_d3")
	buyThrough(t, e, acct.ID, "cs_test_d4")
	pi3, pi4 := paymentIntentOf("cs_test_d3"), paymentIntentOf("cs_test_d4")
	hook(t, e, disputeEvent("charge.dispute.closed", "du_test_3", pi3, 200, "lost"), 200, "dispute lost")
	hook(t, e, disputeEvent("charge.dispute.created", "du_test_3", pi3, 200, "needs_response"), 200, "duplicate")
	hook(t, e, disputeEvent("charge.dispute.created", "du_test_4", pi4, 200, "warning_needs_response"), 200, "dispute open")
	hook(t, e, disputeEvent("charge.dispute.closed", "du_test_4", pi4, 200, "under_review"), 200, "ignored: dispute status")
	wantBalance(t, e.store, acct.ID, 10, 10)
	hook(t, e, disputeEvent("charge.dispute.closed", "du_test_4", pi4, 200, "warning_closed"), 200, "dispute won")
	wantBalance(t, e.store, acct.ID, 20, 20)

	ds, _ := e.store.ListReversals(bg, acct.ID, ledger.ReversalDispute, 0)
	if len(ds) != 4 || ds[0].Reason != "fraudulent" {
		t.Fatalf("disputes: %+v", ds)
	}
	verifyOK(t, e.store)
}

// TestWebhookRefundDuringInquiry: a purchase of 10 credits, an inquiry (warning_needs_response)
// freezes them, the operator refunds the whole charge, the inquiry closes (warning_closed): the
// customer has the money back, so the credits stay taken; each event again changes nothing. A
// partial refund during an inquiry leaves the purchase what the rest paid for. On both engines.
func TestWebhookRefundDuringInquiry(t *testing.T) {
	for name, env := range map[string]func(t *testing.T) *testEnv{
		"badger": func(t *testing.T) *testEnv { return newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret)) },
		"postgres": func(t *testing.T) *testEnv {
			s := postgresOpener(t, pgtest.NewDatabase(t))()
			return newTestEnvOn(t, s, withStripe("http://127.0.0.1:1", testWebhookSecret))
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := env(t)
			acct, _ := e.store.CreateAccount(bg, "inquiry@example.com")
			buyThrough(t, e, acct.ID, "cs_test_inq1")
			pi := paymentIntentOf("cs_test_inq1")
			events := []struct {
				payload []byte
				reply   string
				bal     int64
			}{
				{disputeEvent("charge.dispute.created", "du_test_inq1", pi, 200, "warning_needs_response"), "dispute open", 0},
				{refundEvent("refund.created", "re_test_inq1", pi, 200, "succeeded"), "refund applied", 0},
				{disputeEvent("charge.dispute.closed", "du_test_inq1", pi, 200, "warning_closed"), "dispute won", 0},
			}
			for _, ev := range events {
				hook(t, e, ev.payload, 200, ev.reply)
				wantBalance(t, e.store, acct.ID, ev.bal, ev.bal)
			}
			for _, ev := range events {
				hook(t, e, ev.payload, 200, "duplicate")
			}
			wantBalance(t, e.store, acct.ID, 0, 0)

			buyThrough(t, e, acct.ID, "cs_test_inq2")
			pi2 := paymentIntentOf("cs_test_inq2")
			hook(t, e, disputeEvent("charge.dispute.created", "du_test_inq2", pi2, 200, "warning_needs_response"), 200, "dispute open")
			hook(t, e, refundEvent("refund.created", "re_test_inq2", pi2, 50, "succeeded"), 200, "refund applied")
			hook(t, e, disputeEvent("charge.dispute.closed", "du_test_inq2", pi2, 200, "warning_closed"), 200, "dispute won")
			wantBalance(t, e.store, acct.ID, 7, 7) // 1.50 of 2.00 EUR kept: 7.5 credits, rounded down
			verifyOK(t, e.store)
		})
	}
}

// TestWebhookRefundBeforeDelayedSuccess: a refund of a payment that settles later, delivered
// before the payment's success (Stripe does not promise the order), is answered 500 and takes
// nothing; after the success credits the purchase, its delivery again takes the credits.
func TestWebhookRefundBeforeDelayedSuccess(t *testing.T) {
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret))
	acct, _ := e.store.CreateAccount(bg, "early-refund@example.com")
	hook(t, e, checkoutEvent("checkout.session.completed", "cs_test_sepa_re", acct.ID, "unpaid", "10", 200), 200, "payment pending")
	early := refundEvent("refund.created", "re_test_sepa", paymentIntentOf("cs_test_sepa_re"), 200, "succeeded")
	hook(t, e, early, 500, "retry later")
	wantBalance(t, e.store, acct.ID, 0, 0)
	hook(t, e, checkoutEvent("checkout.session.async_payment_succeeded", "cs_test_sepa_re", acct.ID, "paid", "10", 200), 200, "credited")
	wantBalance(t, e.store, acct.ID, 10, 10)
	hook(t, e, early, 200, "refund applied")
	hook(t, e, early, 200, "duplicate")
	wantBalance(t, e.store, acct.ID, 0, 0)
	verifyOK(t, e.store)
}

// TestWebhookDelayedPayment: a session paid by a method that settles later is pending (nothing
// credited), then credited once when the payment succeeds; one whose payment fails credits
// nothing.
func TestWebhookDelayedPayment(t *testing.T) {
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret))
	acct, _ := e.store.CreateAccount(bg, "sepa@example.com")
	payments := func() map[string]ledger.PaymentStatus {
		ps, err := e.store.AccountPayments(bg, acct.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]ledger.PaymentStatus{}
		for _, p := range ps {
			out[p.Reference] = p.Status
		}
		return out
	}
	hook(t, e, checkoutEvent("checkout.session.completed", "cs_test_sepa", acct.ID, "unpaid", "10", 200), 200, "payment pending")
	if got := payments(); got["cs_test_sepa"] != ledger.PaymentPending {
		t.Fatalf("payments after the completion: %v", got)
	}
	wantBalance(t, e.store, acct.ID, 0, 0)
	succeeded := checkoutEvent("checkout.session.async_payment_succeeded", "cs_test_sepa", acct.ID, "paid", "10", 200)
	hook(t, e, succeeded, 200, "credited")
	hook(t, e, succeeded, 200, "duplicate")
	// A late copy of the completion does not make it pending again.
	hook(t, e, checkoutEvent("checkout.session.completed", "cs_test_sepa", acct.ID, "unpaid", "10", 200), 200, "payment pending")
	if got := payments(); got["cs_test_sepa"] != ledger.PaymentPaid {
		t.Fatalf("payments after the success: %v", got)
	}
	wantBalance(t, e.store, acct.ID, 10, 10)

	hook(t, e, checkoutEvent("checkout.session.completed", "cs_test_sepa_fail", acct.ID, "unpaid", "10", 200), 200, "payment pending")
	failed := checkoutEvent("checkout.session.async_payment_failed", "cs_test_sepa_fail", acct.ID, "unpaid", "10", 200)
	hook(t, e, failed, 200, "payment failed")
	hook(t, e, failed, 200, "payment failed")
	if got := payments(); got["cs_test_sepa_fail"] != ledger.PaymentFailed {
		t.Fatalf("payments after the failure: %v", got)
	}
	wantBalance(t, e.store, acct.ID, 10, 10)
	if got := purchasesOf(t, e.store, acct.ID); fmt.Sprint(got) != "map[cs_test_sepa:1]" {
		t.Fatalf("purchases %v", got)
	}
}
