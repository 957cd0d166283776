package account

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/caddy-textgen/textgen/caddymodule/internal/mailtest"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// intentRecorder sits in front of stripe-mock (which checks every request against Stripe's
// OpenAPI specification) and remembers every PaymentIntent created through it, with its form and
// Idempotency-Key. stripe-mock always succeeds, so a declined card is a fault it cannot produce:
// with decline set, the recorder itself answers POST /v1/payment_intents as Stripe does for a
// declined card (402 and Stripe's error JSON) — a fake, named as such, for that fault only.
type intentRecorder struct {
	target  string
	srv     *httptest.Server
	decline atomic.Bool

	mu      sync.Mutex
	intents []recordedIntent
	paths   []string
}

type recordedIntent struct {
	Form        url.Values
	Idempotency string
	ID          string
}

func newIntentRecorder(t testing.TB, target string) *intentRecorder {
	rec := &intentRecorder{target: target}
	rec.srv = httptest.NewServer(rec)
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *intentRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.paths = append(rec.paths, r.Method+" "+r.URL.Path)
	rec.mu.Unlock()
	if r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" && rec.decline.Load() {
		r.ParseForm()
		rec.mu.Lock()
		rec.intents = append(rec.intents, recordedIntent{Form: r.PostForm, Idempotency: r.Header.Get("Idempotency-Key"), ID: "pi_declined"})
		rec.mu.Unlock()
		// Stripe's answer to a declined off-session payment (the card_declined error object).
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusPaymentRequired)
		fmt.Fprint(w, `{"error":{"code":"card_declined","decline_code":"insufficient_funds","doc_url":"https://stripe.com/docs/error-codes/card-declined",`+
			`"message":"Your card has insufficient funds.","type":"card_error",`+
			`"payment_intent":{"id":"pi_declined","object":"payment_intent","status":"requires_payment_method","amount":200,"currency":"eur"}}}`)
		return
	}
	relayStripe(w, r, rec.target, func(body []byte, res *http.Response, out []byte) []byte {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" && res.StatusCode == 200 {
			form, _ := url.ParseQuery(string(body))
			var pi struct{ ID string }
			json.Unmarshal(out, &pi)
			rec.mu.Lock()
			rec.intents = append(rec.intents, recordedIntent{Form: form, Idempotency: r.Header.Get("Idempotency-Key"), ID: pi.ID})
			rec.mu.Unlock()
		}
		return out
	})
}

func (rec *intentRecorder) made() []recordedIntent {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]recordedIntent(nil), rec.intents...)
}

// withTopUp turns automatic top-up on, with Stripe at the recorder.
func withTopUp(rec *intentRecorder) envOpt {
	return func(c *appConfig) {
		withStripe(rec.srv.URL, testWebhookSecret)(c)
		c.topUp = true
	}
}

// intentEvent is a Stripe event carrying a top-up's PaymentIntent, shaped as Stripe sends it.
func intentEvent(evType, piID string, t ledger.TopUp, pkg string, amount int64) []byte {
	obj := map[string]any{
		"id": piID, "object": "payment_intent", "amount": amount, "amount_received": amount, "currency": "eur",
		"status":   map[string]string{"payment_intent.succeeded": "succeeded"}[evType],
		"metadata": map[string]string{"topup_id": t.ID, "account_id": t.AccountID, "package": pkg},
	}
	if evType == "payment_intent.payment_failed" {
		obj["status"] = "requires_payment_method"
		obj["last_payment_error"] = map[string]string{"code": "card_declined", "message": "Your card was declined."}
	}
	b, _ := json.Marshal(map[string]any{"id": "evt_" + piID + "_" + evType, "object": "event", "api_version": stripe.APIVersion,
		"created": time.Now().Unix(), "type": evType, "data": map[string]any{"object": obj}})
	return b
}

// setupEvent is checkout.session.completed of a setup-mode session.
func setupEvent(sessionID, acctID, customer, setupIntent string) []byte {
	b, _ := json.Marshal(map[string]any{"id": "evt_" + sessionID, "object": "event", "api_version": stripe.APIVersion,
		"created": time.Now().Unix(), "type": "checkout.session.completed", "data": map[string]any{"object": map[string]any{
			"id": sessionID, "object": "checkout.session", "mode": "setup", "status": "complete", "client_reference_id": acctID,
			"customer": customer, "setup_intent": setupIntent}}})
	return b
}

// waitIntents waits until the recorder has seen n PaymentIntents (and fails past a deadline).
func waitIntents(t *testing.T, rec *intentRecorder, n int) []recordedIntent {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got := rec.made(); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d PaymentIntents after 20 s, want %d", len(rec.made()), n)
		}
	}
}

// topUpsOf lists the account's top-ups.
func topUpsOf(t *testing.T, s ledger.Store, acct string) []ledger.TopUp {
	t.Helper()
	ts, err := s.ListTopUps(bg, acct, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// waitTopUp waits until the account's newest top-up has a PaymentIntent or is no longer pending.
func waitTopUp(t *testing.T, s ledger.Store, acct string) ledger.TopUp {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ts := topUpsOf(t, s, acct); len(ts) > 0 && (ts[0].PaymentIntent != "" || ts[0].Status != ledger.TopUpPending) {
			return ts[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no top-up with a payment after 20 s: %+v", topUpsOf(t, s, acct))
		}
	}
}

// TestTopUpAgainstStripeMock: the whole path on stripe-mock. A card saved through a setup-mode
// Checkout Session (the webhook reads its SetupIntent from the API); the rule's form, with bad
// input refused; a hold under the threshold makes one off-session PaymentIntent (many holds at
// once too) with the top-up's id as idempotency key; the signed payment_intent.succeeded
// credits the package once (replayed: nothing more); the monthly cap holds.
func TestTopUpAgainstStripeMock(t *testing.T) {
	sm := realStripeMock(t)
	rec := newIntentRecorder(t, sm.URL)
	e := newTestEnv(t, withTopUp(rec))
	t.Cleanup(e.app.close)
	b := e.browser()
	acct := b.signup("topup@example.com")
	hook := e.srv.URL + "/account/stripe/webhook"

	mustContain(t, "buy page", b.get("/account/buy").body, `href="/account/topup"`)
	r := b.get("/account/topup")
	expectStatus(t, "top-up page", r, http.StatusOK)
	mustContain(t, "top-up page", r.body, "No card saved yet", "Save a card")

	// Save a card: a customer, then a setup-mode Checkout Session.
	r = b.post("/account/topup/card", "csrf_token", b.csrf("/account/topup"))
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location(), "https://checkout.stripe.com/") {
		t.Fatalf("save a card: %d %q\n%s", r.status, r.location(), r.body)
	}
	if got := strings.Join(rec.paths, ","); got != "POST /v1/customers,POST /v1/checkout/sessions" {
		t.Fatalf("Stripe was asked %s", got)
	}
	// The form without its CSRF token is refused and asks Stripe for nothing.
	if r := b.post("/account/topup/card"); r.status != http.StatusForbidden {
		t.Fatalf("without CSRF: %d", r.status)
	}
	if status, body := deliver(t, hook, setupEvent("cs_test_setup1", acct.ID, "cus_topup", "seti_123"), testWebhookSecret, time.Now()); status != 200 {
		t.Fatalf("setup webhook: %d %s", status, body)
	}
	rule, err := e.store.TopUpRule(bg, acct.ID)
	if err != nil || rule.Card.PaymentMethodID == "" || rule.Card.CustomerID == "" || rule.Card.Last4 != "4242" {
		t.Fatalf("saved card %+v, %v", rule, err)
	}
	mustContain(t, "top-up page with a card", b.get("/account/topup").body, "ending in 4242", "Change the card")

	// The rule: bad input is refused with a message and saves nothing.
	for _, bad := range [][]string{{"threshold", "0", "package", "10", "monthly_cap", "2"}, {"threshold", "20", "package", "nope", "monthly_cap", "2"},
		{"threshold", "20", "package", "10", "monthly_cap", "x"}} {
		r := b.post("/account/topup", append([]string{"csrf_token", b.csrf("/account/topup"), "enabled", "on"}, bad...)...)
		expectStatus(t, fmt.Sprint("bad rule ", bad), r, http.StatusBadRequest)
		mustContain(t, "bad rule", r.body, `class="error"`)
	}
	if rule, _ := e.store.TopUpRule(bg, acct.ID); rule.Enabled {
		t.Fatal("a refused form enabled the rule")
	}
	r = b.post("/account/topup", "csrf_token", b.csrf("/account/topup"), "threshold", "20", "package", "10", "monthly_cap", "2", "enabled", "on")
	if r.status != http.StatusSeeOther {
		t.Fatalf("saving the rule: %d\n%s", r.status, r.body)
	}
	mustContain(t, "saved rule", b.get("/account/topup?saved=rule").body, `value="20"`, "automatic top-up is saved")

	// 21 credits, then a hold: 20 available is not under 20; the next hold is.
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 21, Reference: "g1"})
	h, err := e.store.Hold(bg, ledger.HoldRequest{AccountID: acct.ID, Mode: ledger.Live, RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	e.app.Held(acct.ID, h.Available)
	if h, err = e.store.Hold(bg, ledger.HoldRequest{AccountID: acct.ID, Mode: ledger.Live, RequestID: "r2"}); err != nil || h.Available != 19 {
		t.Fatalf("hold: %+v, %v", h, err)
	}
	var wg sync.WaitGroup
	for range 10 { // many holds under the threshold at once: one top-up
		wg.Go(func() { e.app.Held(acct.ID, h.Available) })
	}
	wg.Wait()
	tu := waitTopUp(t, e.store, acct.ID)
	for range 5 { // the sweep finds it pending
		e.app.topUp(bg, acct.ID)
	}
	intents := rec.made()
	if len(intents) != 1 {
		t.Fatalf("%d PaymentIntents, want 1", len(intents))
	}
	pi := intents[0]
	for k, v := range map[string]string{"amount": "200", "currency": "eur", "off_session": "true", "confirm": "true", "customer": rule.Card.CustomerID,
		"payment_method": rule.Card.PaymentMethodID, "metadata[topup_id]": tu.ID, "metadata[account_id]": acct.ID, "metadata[package]": "10"} {
		if got := pi.Form.Get(k); got != v {
			t.Errorf("PaymentIntent parameter %s = %q, want %q", k, got, v)
		}
	}
	if pi.Idempotency != tu.ID || tu.PaymentIntent != pi.ID || tu.Status != ledger.TopUpPending {
		t.Fatalf("PaymentIntent %+v, top-up %+v", pi, tu)
	}

	// Stripe reports it paid, twice: credited once.
	for range 2 {
		if status, body := deliver(t, hook, intentEvent("payment_intent.succeeded", pi.ID, tu, "10", 200), testWebhookSecret, time.Now()); status != 200 {
			t.Fatalf("succeeded webhook: %d %s", status, body)
		}
	}
	if got := purchasesOf(t, e.store, acct.ID); fmt.Sprint(got) != fmt.Sprintf("map[%s:1]", pi.ID) {
		t.Fatalf("purchases %v", got)
	}
	if bal, _ := e.store.Balance(bg, acct.ID); bal.Available != 29 {
		t.Fatalf("available %d, want 19 + 10", bal.Available)
	}
	if got, _ := e.store.GetTopUp(bg, tu.ID); got.Status != ledger.TopUpSucceeded {
		t.Fatalf("top-up %+v", got)
	}
	// A PaymentIntent of a Checkout purchase (no top-up metadata) is left to the checkout events.
	status, body := deliver(t, hook, intentEvent("payment_intent.succeeded", "pi_checkout", ledger.TopUp{}, "10", 200), testWebhookSecret, time.Now())
	if status != 200 || !strings.Contains(body, "not a top-up") {
		t.Fatalf("a purchase's payment intent: %d %s", status, body)
	}

	// The monthly cap of 2: a second top-up, then none.
	for i := range 10 {
		mustHoldOn(t, e.store, acct.ID, fmt.Sprintf("s%d", i))
	}
	e.app.topUp(bg, acct.ID) // the sweep
	tu2 := waitTopUp(t, e.store, acct.ID)
	if tu2.ID == tu.ID || len(rec.made()) != 2 {
		t.Fatalf("second top-up %+v, %d PaymentIntents", tu2, len(rec.made()))
	}
	deliver(t, hook, intentEvent("payment_intent.succeeded", tu2.PaymentIntent, tu2, "10", 200), testWebhookSecret, time.Now())
	for i := range 15 {
		mustHoldOn(t, e.store, acct.ID, fmt.Sprintf("c%d", i))
	}
	e.app.topUp(bg, acct.ID)
	if _, err := e.store.BeginTopUp(bg, acct.ID); !strings.Contains(fmt.Sprint(err), ledger.TopUpRefusedCap) {
		t.Fatalf("past the cap: %v", err)
	}
	if n := len(rec.made()); n != 2 {
		t.Fatalf("%d PaymentIntents with a monthly cap of 2", n)
	}
	r = b.get("/account/topup")
	mustContain(t, "top-up page", r.body, "2 of 2 this month", "succeeded")
}

func mustHoldOn(t *testing.T, s ledger.Store, acct, rid string) {
	t.Helper()
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: rid}); err != nil {
		t.Fatal(err)
	}
}

// TestTopUpDeclinePausesAndMails: a declined card (Stripe's card_declined answer) fails the
// top-up, pauses the rule and e-mails the account once, with the link to the top-up page; a
// new card resumes it. A late payment_intent.payment_failed of it sends nothing more.
func TestTopUpDeclinePausesAndMails(t *testing.T) {
	sm := realStripeMock(t)
	rec := newIntentRecorder(t, sm.URL)
	fastMail(t)
	mp := mailtest.New(t)
	store := diskLedger(t, t.TempDir())
	t.Cleanup(func() { store.Close() })
	e := newTestEnvOn(t, store, withMail(t, mp), withTopUp(rec))
	t.Cleanup(e.app.close)
	email := uniqueEmail("declined")
	acct := e.browser().signup(email)
	if _, err := store.SaveTopUpCard(bg, acct.ID, ledger.TopUpCard{CustomerID: "cus_1", PaymentMethodID: "pm_card_chargeDeclined"}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.SetTopUpRule(bg, acct.ID, ledger.TopUpSettings{Threshold: 5, Package: "10", MonthlyCap: 3, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	rec.decline.Store(true)
	e.app.topUp(bg, acct.ID)
	tu := waitTopUp(t, store, acct.ID)
	if tu.Status != ledger.TopUpFailed || !strings.Contains(tu.Detail, "insufficient funds") || tu.PaymentIntent != "pi_declined" {
		t.Fatalf("declined top-up %+v", tu)
	}
	rule, _ := store.TopUpRule(bg, acct.ID)
	if !rule.Paused || !strings.Contains(rule.PausedWhy, "declined") {
		t.Fatalf("rule after a decline %+v", rule)
	}
	m := mp.WaitFor(t, email, "top-up", 30*time.Second)
	mustContain(t, "decline mail", m.Text, "insufficient funds", "/account/topup")
	// Paused: the sweep makes no payment; a late failure event mails nothing more.
	e.app.topUp(bg, acct.ID)
	if status, body := deliver(t, e.srv.URL+"/account/stripe/webhook", intentEvent("payment_intent.payment_failed", "pi_declined", tu, "10", 200), testWebhookSecret, time.Now()); status != 200 {
		t.Fatalf("failed webhook: %d %s", status, body)
	}
	waitOutboxEmpty(t, store)
	if n, k := countMail(t, mp, email, "top-up"), len(rec.made()); n != 1 || k != 1 {
		t.Fatalf("%d e-mails and %d PaymentIntents after one decline", n, k)
	}
	// A new card resumes it.
	rec.decline.Store(false)
	if status, body := deliver(t, e.srv.URL+"/account/stripe/webhook", setupEvent("cs_test_setup2", acct.ID, "cus_1", "seti_123"), testWebhookSecret, time.Now()); status != 200 {
		t.Fatalf("setup webhook: %d %s", status, body)
	}
	if rule, _ := store.TopUpRule(bg, acct.ID); rule.Paused {
		t.Fatalf("a new card left the rule paused: %+v", rule)
	}
	e.app.topUp(bg, acct.ID)
	waitIntents(t, rec, 2)
}

// TestTopUpRaceOnPostgres: two instances on one PostgreSQL see the same low balance at once,
// many times: one PaymentIntent.
func TestTopUpRaceOnPostgres(t *testing.T) {
	sm := realStripeMock(t)
	rec := newIntentRecorder(t, sm.URL)
	open := postgresOpener(t, pgtest.NewDatabase(t))
	a := newTestEnvOn(t, open(), withTopUp(rec))
	b := newTestEnvOn(t, open(), withTopUp(rec))
	t.Cleanup(a.app.close)
	t.Cleanup(b.app.close)
	acct := a.browser().signup("race@example.com")
	ledgerRule(t, a.store, acct.ID)
	var wg sync.WaitGroup
	for i := range 16 {
		env := a
		if i%2 == 1 {
			env = b
		}
		wg.Go(func() { env.app.topUp(context.Background(), acct.ID) })
	}
	wg.Wait()
	if n := len(rec.made()); n != 1 {
		t.Fatalf("%d PaymentIntents from two instances racing, want 1", n)
	}
	if ts := topUpsOf(t, b.store, acct.ID); len(ts) != 1 {
		t.Fatalf("top-ups %+v", ts)
	}
}

// ledgerRule saves a card and an active rule (threshold 5, package 10, cap 3) for acct.
func ledgerRule(t *testing.T, s ledger.Store, acct string) {
	t.Helper()
	if _, err := s.SaveTopUpCard(bg, acct, ledger.TopUpCard{CustomerID: "cus_1", PaymentMethodID: "pm_card_visa", Brand: "visa", Last4: "4242"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetTopUpRule(bg, acct, ledger.TopUpSettings{Threshold: 5, Package: "10", MonthlyCap: 3, Enabled: true}); err != nil {
		t.Fatal(err)
	}
}
