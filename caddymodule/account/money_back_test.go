package account

import (
	"encoding/csv"
	"net/http"
	"strings"
	"testing"
)

// TestDashboardMoneyBack: on a Badger ledger on disk, with Stripe's signed events, My Account
// shows what flowed back and what is not paid yet: a delayed payment is "payment pending" on the
// dashboard and on Stripe's return page until its success credits it (then it is a purchase) or
// its failure says "payment failed"; refunds and disputes are listed with their id, amount,
// credits and purchase; the CSV export has their entries with the id and amount. Another
// customer sees none of it.
func TestDashboardMoneyBack(t *testing.T) {
	store := diskLedger(t, t.TempDir())
	t.Cleanup(func() { store.Close() })
	e := newTestEnvOn(t, store, withStripe("http://127.0.0.1:1", testWebhookSecret))
	b := e.browser()
	acct := b.signup("money-back@example.com")

	hook(t, e, checkoutEvent("checkout.session.completed", "cs_test_mb_sepa", acct.ID, "unpaid", "10", 200), 200, "payment pending")
	dash := b.get("/account/").body
	mustContain(t, "dashboard with a pending payment", dash, `id="unpaid-payments"`, "cs_test_mb_sepa", "payment pending")
	mustContain(t, "return page of a pending payment", b.get("/account/buy/success?session_id=cs_test_mb_sepa").body,
		`id="payment-pending"`, "€2.00")
	other := e.browser()
	other.signup("someone-else@example.com")
	mustNotContain(t, "another customer's dashboard", other.get("/account/").body, "cs_test_mb_sepa", "payment pending")
	mustNotContain(t, "another customer's return page", other.get("/account/buy/success?session_id=cs_test_mb_sepa").body, "payment-pending", "€2.00")

	hook(t, e, checkoutEvent("checkout.session.async_payment_succeeded", "cs_test_mb_sepa", acct.ID, "paid", "10", 200), 200, "credited")
	dash = b.get("/account/").body
	mustNotContain(t, "dashboard after the payment arrived", dash, "payment pending", `id="unpaid-payments"`)
	mustContain(t, "dashboard after the payment arrived", dash, `href="/account/receipts/cs_test_mb_sepa"`)

	hook(t, e, checkoutEvent("checkout.session.completed", "cs_test_mb_fail", acct.ID, "unpaid", "10", 200), 200, "payment pending")
	hook(t, e, checkoutEvent("checkout.session.async_payment_failed", "cs_test_mb_fail", acct.ID, "unpaid", "10", 200), 200, "payment failed")
	mustContain(t, "dashboard after a failed payment", b.get("/account/").body, "cs_test_mb_fail", "payment failed")
	mustContain(t, "return page of a failed payment", b.get("/account/buy/success?session_id=cs_test_mb_fail").body, `id="payment-failed"`)

	buyThrough(t, e, acct.ID, "cs_test_mb_disp")
	hook(t, e, refundEvent("refund.created", "re_test_mb1", paymentIntentOf("cs_test_mb_sepa"), 100, "succeeded"), 200, "refund applied")
	hook(t, e, disputeEvent("charge.dispute.created", "du_test_mb1", paymentIntentOf("cs_test_mb_disp"), 200, "needs_response"), 200, "dispute open")
	dash = b.get("/account/").body
	mustContain(t, "dashboard with a refund and a dispute", dash, `id="reversals"`,
		`<code class="ref">re_test_mb1</code>`, `<td data-label="Amount" class="num">€1.00</td>`,
		`<code class="ref">du_test_mb1</code>`, "dispute open", `href="/account/receipts/cs_test_mb_disp"`)
	mustNotContain(t, "another customer's dashboard", other.get("/account/").body, "re_test_mb1", "du_test_mb1", `id="reversals"`)

	r := b.get("/account/usage.csv")
	expectStatus(t, "export", r, http.StatusOK)
	recs, err := csv.NewReader(strings.NewReader(r.body)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, rec := range recs[1:] {
		rows[rec[9]] = rec // by reference
	}
	// kind, credits, reference, amount, currency
	for ref, want := range map[string]string{
		"re_test_mb1": "refund -5 re_test_mb1 1.00 EUR",
		"du_test_mb1": "dispute -10 du_test_mb1 2.00 EUR",
	} {
		rec := rows[ref]
		if rec == nil {
			t.Fatalf("no row of %s in the CSV:\n%s", ref, r.body)
		}
		if got := strings.Join([]string{rec[1], rec[3], rec[9], rec[10], rec[11]}, " "); got != want {
			t.Fatalf("row of %s: %q, want %q", ref, got, want)
		}
	}
}
