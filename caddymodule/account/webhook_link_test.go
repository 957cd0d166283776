package account

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// stripeMockRewritingSessions is the real stripe-mock behind a proxy that rewrites one thing it
// cannot be made to answer: stripe-mock checks the request to list Checkout Sessions against
// Stripe's specification and answers its one fixed session, whose payment intent, account and
// metadata are its own; for a payment intent in sessions, the proxy puts that session's fields
// into the answer (else it passes stripe-mock's answer on unchanged). It records the query of
// every list.
type stripeMockRewritingSessions struct {
	target   string
	srv      *httptest.Server
	mu       sync.Mutex
	sessions map[string]map[string]any // by payment intent: the fields to set
	queries  []url.Values
}

func newStripeMockRewritingSessions(t *testing.T, target string) *stripeMockRewritingSessions {
	p := &stripeMockRewritingSessions{target: target, sessions: map[string]map[string]any{}}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *stripeMockRewritingSessions) set(pi string, fields map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sessions[pi] = fields
}

func (p *stripeMockRewritingSessions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	relayStripe(w, r, p.target, func(_ []byte, res *http.Response, out []byte) []byte {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/checkout/sessions" || res.StatusCode != 200 {
			return out
		}
		q := r.URL.Query()
		p.mu.Lock()
		p.queries = append(p.queries, q)
		fields := p.sessions[q.Get("payment_intent")]
		p.mu.Unlock()
		var list map[string]any
		if fields != nil && json.Unmarshal(out, &list) == nil {
			if data, _ := list["data"].([]any); len(data) > 0 {
				cs := data[0].(map[string]any)
				for k, v := range fields {
					cs[k] = v
				}
				list["data"] = data[:1]
				out, _ = json.Marshal(list)
				res.Header.Del("Content-Length")
			}
		}
		return out
	})
}

// TestWebhookRefundOfEarlierPurchase: a refund or dispute of a purchase credited before payments
// were recorded is not answered 500 forever: the webhook asks Stripe's API (stripe-mock, with its
// answer's session rewritten, above) for the Checkout Session of the payment intent, records the
// payment with what the ledger's purchase credited (not what the session's metadata claims) and
// applies the event, once. A session whose purchase is not in the ledger yet is 500 until it is;
// a session of another account links nothing; a payment intent no session names (stripe-mock's
// fixed session names another) is no purchase: 200, nothing taken. Badger on disk.
func TestWebhookRefundOfEarlierPurchase(t *testing.T) {
	sm := realStripeMock(t)
	proxy := newStripeMockRewritingSessions(t, sm.URL)
	store := diskLedger(t, t.TempDir())
	t.Cleanup(func() { store.Close() })
	e := newTestEnvOn(t, store, withStripe(proxy.srv.URL, testWebhookSecret))
	acct, _ := store.CreateAccount(bg, "earlier@example.com")
	other, _ := store.CreateAccount(bg, "someone@example.com")
	// What an earlier version booked: the purchase, no payment.
	for _, cs := range []string{"cs_test_old_1", "cs_test_old_2"} {
		mustGrant(t, store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10,
			Reference: cs, Reason: checkoutReason + "10", AmountCents: 200, Currency: "EUR"})
	}
	session := func(cs, acctID, pi string) map[string]any {
		return map[string]any{"id": cs, "client_reference_id": acctID, "payment_intent": pi, "payment_status": "paid",
			"status": "complete", "amount_total": 200, "currency": "eur",
			"metadata": map[string]any{"package": "10", "credits": "999", "price_cents": "200", "account_id": acctID}}
	}
	proxy.set("pi_test_old_1", session("cs_test_old_1", acct.ID, "pi_test_old_1"))
	refund := refundEvent("refund.created", "re_test_old_1", "pi_test_old_1", 100, "succeeded")
	hook(t, e, refund, 200, "refund applied")
	wantBalance(t, store, acct.ID, 15, 15)
	hook(t, e, refund, 200, "duplicate")
	wantBalance(t, store, acct.ID, 15, 15)
	if p, err := store.GetPayment(bg, "pi_test_old_1"); err != nil || p.Reference != "cs_test_old_1" || p.Credits != 10 || p.AccountID != acct.ID {
		t.Fatalf("the linked payment: %+v %v (credits must be the purchase's 10, not the metadata's 999)", p, err)
	}
	if len(proxy.queries) == 0 || proxy.queries[0].Get("payment_intent") != "pi_test_old_1" {
		t.Fatalf("Stripe was asked %v", proxy.queries)
	}

	// A session of another account than the purchase's: nothing linked, 500 (retried).
	proxy.set("pi_test_old_2", session("cs_test_old_2", other.ID, "pi_test_old_2"))
	hook(t, e, disputeEvent("charge.dispute.created", "du_test_old_2", "pi_test_old_2", 200, "needs_response"), 500, "unknown payment")
	wantBalance(t, store, acct.ID, 15, 15)
	if _, err := store.GetPayment(bg, "pi_test_old_2"); err == nil {
		t.Fatal("a payment was linked to another account's purchase")
	}

	// A session whose completion has not arrived: 500 until it has, then applied.
	pi := paymentIntentOf("cs_test_late")
	proxy.set(pi, session("cs_test_late", acct.ID, pi))
	late := refundEvent("refund.created", "re_test_late", pi, 200, "succeeded")
	hook(t, e, late, 500, "unknown payment")
	buyThrough(t, e, acct.ID, "cs_test_late")
	hook(t, e, late, 200, "refund applied")
	wantBalance(t, store, acct.ID, 15, 15)

	// No session has the payment intent (stripe-mock's own session names another): not a
	// purchase of this service, acknowledged, nothing taken.
	hook(t, e, refundEvent("refund.created", "re_test_foreign_pi", "pi_test_not_checkout", 200, "succeeded"), 200, "of no purchase")
	wantBalance(t, store, acct.ID, 15, 15)
	verifyOK(t, store)
}
