package account

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCheckoutAgainstStripeMock creates Checkout Sessions against the real stripe-mock (which
// validates every request against Stripe's OpenAPI specification), then pays them by delivering
// signed webhooks, and checks the whole round trip.
func TestCheckoutAgainstStripeMock(t *testing.T) {
	sm := realStripeMock(t)
	rec := newStripeRecorder(t, sm.URL)
	e := newTestEnv(t, withStripe(rec.srv.URL, testWebhookSecret))
	b := e.browser()
	acct := b.signup("checkout@example.com")

	r := b.get("/account/buy")
	expectStatus(t, "buy page", r, http.StatusOK)
	mustContain(t, "buy page", r.body, "Buy 10 credits for €2.00", "Buy 50 credits for €9.00", "€0.20 per request")

	var ids []string
	for _, pkg := range []string{"10", "50", "10"} {
		r = b.post("/account/buy", "csrf_token", b.csrf("/account/buy"), "package", pkg)
		if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location(), "https://checkout.stripe.com/") {
			t.Fatalf("buy %s: %d %q\n%s", pkg, r.status, r.location(), r.body)
		}
		created := rec.created()
		cs := created[len(created)-1]
		if cs.URL != r.location() || !strings.HasPrefix(cs.ID, "cs_test_") {
			t.Fatalf("redirected to %q, stripe-mock answered %+v", r.location(), cs)
		}
		price := map[string]string{"10": "200", "50": "900"}[pkg]
		want := map[string]string{
			"mode":                                          "payment",
			"client_reference_id":                           acct.ID,
			"customer_email":                                "checkout@example.com",
			"metadata[package]":                             pkg,
			"metadata[account_id]":                          acct.ID,
			"line_items[0][quantity]":                       "1",
			"line_items[0][price_data][currency]":           "eur",
			"line_items[0][price_data][unit_amount]":        price,
			"line_items[0][price_data][product_data][name]": pkg + " credits",
			"success_url":                                   e.srv.URL + "/account/buy/success?session_id={CHECKOUT_SESSION_ID}",
			"cancel_url":                                    e.srv.URL + "/account/buy/cancel",
		}
		for k, v := range want {
			if got := cs.Form.Get(k); got != v {
				t.Errorf("checkout session parameter %s = %q, want %q", k, got, v)
			}
		}
		ids = append(ids, cs.ID)
	}
	// Invoices and tax IDs are the operator's choice, off by default.
	for _, k := range []string{"invoice_creation[enabled]", "tax_id_collection[enabled]"} {
		if v, ok := rec.created()[0].Form[k]; ok {
			t.Errorf("checkout session parameter %s = %q without the setting", k, v)
		}
	}
	if ids[0] == ids[1] || ids[1] == ids[2] {
		t.Fatalf("stripe-mock gave equal session ids: %v", ids)
	}

	// Before the webhook, the return page says the payment is being confirmed.
	r = b.get("/account/buy/success?session_id=" + ids[0])
	mustContain(t, "success page before the webhook", r.body, "being confirmed")
	mustContain(t, "cancel page", b.get("/account/buy/cancel").body, "Nothing was charged")

	// Stripe reports the first two as paid (the second twice); the third was abandoned.
	url := e.srv.URL + "/account/stripe/webhook"
	for _, c := range []struct{ id, pkg string }{{ids[0], "10"}, {ids[1], "50"}, {ids[1], "50"}} {
		price := map[string]int64{"10": 200, "50": 900}[c.pkg]
		status, body := deliver(t, url, checkoutEvent("checkout.session.completed", c.id, acct.ID, "paid", c.pkg, price), testWebhookSecret, time.Now())
		if status != 200 {
			t.Fatalf("webhook for %s: %d %s", c.id, status, body)
		}
	}
	got := purchasesOf(t, e.store, acct.ID)
	if len(got) != 2 || got[ids[0]] != 1 || got[ids[1]] != 1 {
		t.Fatalf("purchases %v", got)
	}
	r = b.get("/account/buy/success?session_id=" + ids[0])
	mustContain(t, "success page after the webhook", r.body, "Your payment of €2.00 is confirmed", "10 credits", `id="live-credits">60<`)
	r = b.get("/account/")
	mustContain(t, "dashboard", r.body, `aria-labelledby="live-label">60<`, ids[0], ids[1], "€9.00")
}

// TestCheckoutInvoicesAndTaxIDs: with invoice_creation and tax_id_collection, the Checkout
// Session asks Stripe (stripe-mock, which checks the request against Stripe's API) to create an
// invoice and collect tax IDs.
func TestCheckoutInvoicesAndTaxIDs(t *testing.T) {
	sm := realStripeMock(t)
	rec := newStripeRecorder(t, sm.URL)
	e := newTestEnv(t, withStripe(rec.srv.URL, testWebhookSecret), func(c *appConfig) {
		c.invoiceCreation, c.taxIDCollection = true, true
	})
	b := e.browser()
	b.signup("invoice@example.com")
	r := b.post("/account/buy", "csrf_token", b.csrf("/account/buy"), "package", "10")
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location(), "https://checkout.stripe.com/") {
		t.Fatalf("buy: %d %q\n%s", r.status, r.location(), r.body)
	}
	form := rec.created()[0].Form
	for _, k := range []string{"invoice_creation[enabled]", "tax_id_collection[enabled]"} {
		if form.Get(k) != "true" {
			t.Errorf("checkout session parameter %s = %q, want true", k, form.Get(k))
		}
	}
}

// TestCheckoutStripeDown shows a 502 page and charges nothing when Stripe cannot be reached.
func TestCheckoutStripeDown(t *testing.T) {
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret))
	b := e.browser()
	b.signup("down@example.com")
	r := b.post("/account/buy", "csrf_token", b.csrf("/account/buy"), "package", "10")
	expectStatus(t, "buy with Stripe down", r, http.StatusBadGateway)
	mustContain(t, "Stripe down", r.body, "Nothing was charged")
}
