package account

import (
	"net/http"
	"strings"
	"testing"
)

// TestRefuseDisputedPurchases: with refuse_disputed_purchases, an account with an open or lost
// dispute gets 403 with a message that says why, on the buy page and for a form sent anyway,
// and Stripe (the real stripe-mock, behind a recorder that counts the Checkout Sessions it
// created) is never asked for a session; once the dispute is won it may buy again. Without the
// setting a disputed account buys as any other. Badger on disk; the events are Stripe's, signed.
func TestRefuseDisputedPurchases(t *testing.T) {
	sm := realStripeMock(t)
	for _, refuse := range []bool{true, false} {
		rec := newStripeRecorder(t, sm.URL)
		store := diskLedger(t, t.TempDir())
		t.Cleanup(func() { store.Close() })
		e := newTestEnvOn(t, store, withStripe(rec.srv.URL, testWebhookSecret), func(c *appConfig) { c.refuseDisputed = refuse })
		b := e.browser()
		acct := b.signup(uniqueEmail("disputed-buyer"))
		buyThrough(t, e, acct.ID, "cs_test_rdp_1")
		buyThrough(t, e, acct.ID, "cs_test_rdp_2")
		pi1, pi2 := paymentIntentOf("cs_test_rdp_1"), paymentIntentOf("cs_test_rdp_2")
		csrf := b.csrf("/account/buy")
		buy := func(what string, want int) {
			t.Helper()
			before := len(rec.created())
			page := b.get("/account/buy")
			r := b.post("/account/buy", "csrf_token", csrf, "package", "10")
			created := len(rec.created()) - before
			if want == http.StatusForbidden {
				expectStatus(t, what+": buy page", page, http.StatusForbidden)
				expectStatus(t, what+": buy", r, http.StatusForbidden)
				for _, body := range []string{page.body, r.body} {
					mustContain(t, what, body, "while a payment of it is disputed with your bank", "contact the operator")
					mustNotContain(t, what, body, "Buy 10 credits for")
				}
				if created != 0 {
					t.Fatalf("%s: %d Checkout Sessions created at Stripe", what, created)
				}
				return
			}
			expectStatus(t, what+": buy page", page, http.StatusOK)
			if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location(), "https://checkout.stripe.com/") || created != 1 {
				t.Fatalf("%s: %d %q, %d sessions created", what, r.status, r.location(), created)
			}
		}
		refused := http.StatusSeeOther
		if refuse {
			refused = http.StatusForbidden
		}
		buy("no dispute", http.StatusSeeOther)
		hook(t, e, disputeEvent("charge.dispute.created", "du_test_rdp_1", pi1, 200, "needs_response"), 200, "dispute open")
		buy("an open dispute", refused)
		hook(t, e, disputeEvent("charge.dispute.closed", "du_test_rdp_1", pi1, 200, "won"), 200, "dispute won")
		buy("a won dispute", http.StatusSeeOther)
		hook(t, e, disputeEvent("charge.dispute.closed", "du_test_rdp_2", pi2, 200, "lost"), 200, "dispute lost")
		buy("a lost dispute", refused)
		// Another account is not touched by this one's dispute.
		other := e.browser()
		other.signup(uniqueEmail("undisputed-buyer"))
		r := other.post("/account/buy", "csrf_token", other.csrf("/account/buy"), "package", "10")
		if r.status != http.StatusSeeOther {
			t.Fatalf("another account's purchase: %d\n%s", r.status, r.body)
		}
	}
}
