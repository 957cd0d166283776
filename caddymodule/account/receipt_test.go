package account

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

func TestReceipt(t *testing.T) {
	e := newTestEnv(t, func(c *appConfig) { c.invoiceCreation = true })
	b := e.browser()
	acct := b.signup("receipt@example.com")
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindPurchase,
		Credits: 50, Reference: "cs_test_receipt", Reason: checkoutReason + "50", AmountCents: 900, Currency: "EUR"})
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant,
		Credits: 5, Reference: "goodwill_1", Reason: "goodwill"})

	// The dashboard links each purchase to its receipt.
	mustContain(t, "dashboard", b.get("/account/").body, `href="/account/receipts/cs_test_receipt"`)
	r := b.get("/account/receipts/cs_test_receipt")
	expectStatus(t, "receipt", r, http.StatusOK)
	mustContain(t, "receipt", r.body, "<h1>Receipt</h1>", "Test API", "receipt@example.com",
		`id="receipt-package">Package 50<`, `id="receipt-credits">50<`, `id="receipt-amount">€9.00 (EUR)<`,
		`id="receipt-reference">cs_test_receipt<`, "Stripe sends the invoice")

	// A grant is not a purchase; an unknown reference and another customer's purchase are not
	// found (the same answer, so a reference tells nobody who paid it).
	other := e.browser()
	other.signup("other@example.com")
	for _, c := range []struct {
		b    *browser
		path string
	}{{b, "/account/receipts/goodwill_1"}, {b, "/account/receipts/cs_test_nothing"}, {other, "/account/receipts/cs_test_receipt"}} {
		r := c.b.get(c.path)
		expectStatus(t, c.path, r, http.StatusNotFound)
		mustContain(t, c.path, r.body, "Receipt not found")
		mustNotContain(t, c.path, r.body, "€9.00", "receipt-credits")
	}
	anon := e.browser().get("/account/receipts/cs_test_receipt")
	if anon.status != http.StatusSeeOther {
		t.Fatalf("logged out: %d", anon.status)
	}
}

// TestReceiptOfOldPurchase: a receipt is found however many purchases came after it. The
// account has 1,001 purchases; its oldest is the 1,001st newest, beyond the 1,000 that
// Purchases lists at most.
func TestReceiptOfOldPurchase(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	acct := b.signup("old-receipt@example.com")
	for i := range 1001 {
		mustGrant(t, e.store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindPurchase,
			Credits: 10, Reference: fmt.Sprintf("cs_test_old_%d", i), Reason: checkoutReason + "10",
			AmountCents: 200, Currency: "EUR"})
	}
	for _, ref := range []string{"cs_test_old_0", "cs_test_old_1000"} {
		r := b.get("/account/receipts/" + ref)
		expectStatus(t, ref, r, http.StatusOK)
		mustContain(t, ref, r.body, `id="receipt-reference">`+ref+`<`, `id="receipt-amount">€2.00 (EUR)<`,
			`id="receipt-package">Package 10<`, `id="receipt-credits">10<`)
	}
	// A reference no purchase can have (longer than the ledger takes) is not found either.
	long := "/account/receipts/cs_test_" + strings.Repeat("x", 300)
	r := b.get(long)
	expectStatus(t, "a reference of 308 bytes", r, http.StatusNotFound)
	mustContain(t, "a reference of 308 bytes", r.body, "Receipt not found")
}

// TestReceiptOfRefundedAndDisputedPurchase: on a Badger ledger on disk, with the refunds and
// disputes delivered as Stripe's signed events, the receipt of a purchase says what came back:
// a partial refund (amount, of what was paid, id, date, credits), then full once the rest is
// refunded; a refund that failed is listed as failed and not counted; a disputed purchase says
// the dispute is open, then how it closed. A purchase with nothing returned says nothing of it.
func TestReceiptOfRefundedAndDisputedPurchase(t *testing.T) {
	store := diskLedger(t, t.TempDir())
	t.Cleanup(func() { store.Close() })
	e := newTestEnvOn(t, store, withStripe("http://127.0.0.1:1", testWebhookSecret))
	b := e.browser()
	acct := b.signup("refunded@example.com")
	for _, cs := range []string{"cs_test_r_part", "cs_test_r_disp", "cs_test_r_none"} {
		buyThrough(t, e, acct.ID, cs)
	}
	part, disp := paymentIntentOf("cs_test_r_part"), paymentIntentOf("cs_test_r_disp")
	hook(t, e, refundEvent("refund.created", "re_test_r1", part, 50, "succeeded"), 200, "refund applied")
	hook(t, e, refundEvent("refund.created", "re_test_r2", part, 30, "pending"), 200, "refund applied")
	hook(t, e, refundEvent("refund.failed", "re_test_r2", part, 30, "failed"), 200, "refund failed")

	r := b.get("/account/receipts/cs_test_r_part")
	expectStatus(t, "receipt of a partly refunded purchase", r, http.StatusOK)
	mustContain(t, "receipt of a partly refunded purchase", r.body,
		`id="receipt-refunded">€0.50 of €2.00 (partial refund)<`, `id="receipt-refunds"`,
		"re_test_r1", "re_test_r2", "refund failed: nothing was refunded", `<td data-label="Credits taken back" class="num">3</td>`)
	mustNotContain(t, "receipt of a partly refunded purchase", r.body, "full refund", "Disputed")

	hook(t, e, refundEvent("refund.created", "re_test_r3", part, 150, "succeeded"), 200, "refund applied")
	mustContain(t, "receipt of a refunded purchase", b.get("/account/receipts/cs_test_r_part").body,
		`id="receipt-refunded">€2.00 of €2.00 (full refund)<`, "re_test_r3")

	hook(t, e, disputeEvent("charge.dispute.created", "du_test_r1", disp, 200, "needs_response"), 200, "dispute open")
	r = b.get("/account/receipts/cs_test_r_disp")
	mustContain(t, "receipt of a disputed purchase", r.body, `class="receipt-dispute">€2.00: dispute open`)
	mustNotContain(t, "receipt of a disputed purchase", r.body, "receipt-refunded", "re_test_r")
	hook(t, e, disputeEvent("charge.dispute.closed", "du_test_r1", disp, 200, "lost"), 200, "dispute lost")
	mustContain(t, "receipt of a lost dispute", b.get("/account/receipts/cs_test_r_disp").body,
		"dispute closed: the payment was returned through your bank")

	r = b.get("/account/receipts/cs_test_r_none")
	mustNotContain(t, "receipt of a purchase with nothing returned", r.body, "receipt-refunded", "Disputed", "re_test_r", "du_test_r")
	// Another customer sees none of it.
	other := e.browser()
	other.signup("not-refunded@example.com")
	r = other.get("/account/receipts/cs_test_r_part")
	expectStatus(t, "another customer's refunded receipt", r, http.StatusNotFound)
	mustNotContain(t, "another customer's refunded receipt", r.body, "re_test_r1")
}
