package account

import (
	"net/http"
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
