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
