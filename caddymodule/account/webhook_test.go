package account

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

const testWebhookSecret = "whsec_test_secret_for_caddy_textgen"

// checkoutEvent is a Stripe event carrying a Checkout Session, shaped as Stripe sends it.
func checkoutEvent(evType, sessionID, acctID, paymentStatus, pkg string, amount int64) []byte {
	return checkoutEventIn(evType, sessionID, acctID, paymentStatus, pkg, amount, "eur", nil)
}

// checkoutEventIn is checkoutEvent with a currency and more metadata.
func checkoutEventIn(evType, sessionID, acctID, paymentStatus, pkg string, amount int64, currency string, meta map[string]string) []byte {
	md := map[string]string{"package": pkg, "account_id": acctID}
	for k, v := range meta {
		md[k] = v
	}
	ev := map[string]any{
		"id":          "evt_" + sessionID + "_" + evType,
		"object":      "event",
		"api_version": stripe.APIVersion,
		"created":     time.Now().Unix(),
		"livemode":    false,
		"type":        evType,
		"data": map[string]any{"object": map[string]any{
			"id":                  sessionID,
			"object":              "checkout.session",
			"client_reference_id": acctID,
			"payment_status":      paymentStatus,
			"status":              "complete",
			"mode":                "payment",
			"amount_total":        amount,
			"currency":            currency,
			"metadata":            md,
			"payment_intent":      paymentIntentOf(sessionID),
		}},
	}
	b, _ := json.Marshal(ev)
	return b
}

// paymentIntentOf is the PaymentIntent of a Checkout Session in the tests' events.
func paymentIntentOf(sessionID string) string { return "pi_of_" + sessionID }

// deliver posts a payload signed as Stripe signs it (secret and timestamp as given).
func deliver(t *testing.T, url string, payload []byte, secret string, at time.Time) (int, string) {
	t.Helper()
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at})
	return deliverHeader(t, url, payload, sp.Header)
}

func deliverHeader(t *testing.T, url string, payload []byte, header string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(payload)))
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set("Stripe-Signature", header)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

func purchasesOf(t *testing.T, s ledger.Store, acct string) map[string]int {
	t.Helper()
	ps, err := s.Purchases(bg, acct, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, p := range ps {
		n[p.Reference]++
	}
	return n
}

// TestWebhookTolerance: the configured tolerance decides, not stripe-go's default (5 minutes).
func TestWebhookTolerance(t *testing.T) {
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret),
		func(c *appConfig) { c.webhookTolerance = time.Minute })
	acct, err := e.store.CreateAccount(bg, "tolerance@example.com")
	if err != nil {
		t.Fatal(err)
	}
	url := e.srv.URL + "/account/stripe/webhook"
	old := checkoutEvent("checkout.session.completed", "cs_test_2min", acct.ID, "paid", "10", 200)
	if status, body := deliver(t, url, old, testWebhookSecret, time.Now().Add(-2*time.Minute)); status != 400 || !strings.Contains(body, "tolerance") {
		t.Errorf("signed 2 minutes ago, tolerance 1 minute: %d %s, want 400", status, body)
	}
	recent := checkoutEvent("checkout.session.completed", "cs_test_30s", acct.ID, "paid", "10", 200)
	if status, body := deliver(t, url, recent, testWebhookSecret, time.Now().Add(-30*time.Second)); status != 200 || !strings.Contains(body, "credited") {
		t.Errorf("signed 30 seconds ago: %d %s, want 200 credited", status, body)
	}
	if got := purchasesOf(t, e.store, acct.ID); fmt.Sprint(got) != "map[cs_test_30s:1]" {
		t.Errorf("purchases %v, want only cs_test_30s", got)
	}
}

// TestWebhook delivers every kind of event the endpoint must handle and checks, at the end,
// that each paid session was credited exactly once.
func TestWebhook(t *testing.T) {
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret))
	acct, err := e.store.CreateAccount(bg, "payer@example.com")
	if err != nil {
		t.Fatal(err)
	}
	url := e.srv.URL + "/account/stripe/webhook"
	nowT := time.Now()
	type c struct {
		name    string
		payload []byte
		secret  string
		at      time.Time
		status  int
		reply   string
	}
	paid1 := checkoutEvent("checkout.session.completed", "cs_test_paid1", acct.ID, "paid", "10", 200)
	paid2 := checkoutEvent("checkout.session.completed", "cs_test_paid2", acct.ID, "paid", "50", 900)
	asyncPending := checkoutEvent("checkout.session.completed", "cs_test_async", acct.ID, "unpaid", "10", 200)
	asyncPaid := checkoutEvent("checkout.session.async_payment_succeeded", "cs_test_async", acct.ID, "paid", "10", 200)
	cases := []c{
		{"valid", paid1, testWebhookSecret, nowT, 200, "credited"},
		{"replayed", paid1, testWebhookSecret, nowT, 200, "duplicate"},
		{"replayed later with a fresh signature", paid1, testWebhookSecret, nowT.Add(time.Minute), 200, "duplicate"},
		{"second package", paid2, testWebhookSecret, nowT, 200, "credited"},
		{"bad signature (other secret)", checkoutEvent("checkout.session.completed", "cs_test_forged", acct.ID, "paid", "10", 200), "whsec_wrong", nowT, 400, "invalid signature"},
		{"too old", checkoutEvent("checkout.session.completed", "cs_test_old", acct.ID, "paid", "10", 200), testWebhookSecret, nowT.Add(-6 * time.Minute), 400, "tolerance"},
		{"unpaid session", checkoutEvent("checkout.session.completed", "cs_test_unpaid", acct.ID, "unpaid", "10", 200), testWebhookSecret, nowT, 200, "not paid"},
		{"unknown package", checkoutEvent("checkout.session.completed", "cs_test_unknownpkg", acct.ID, "paid", "999", 200), testWebhookSecret, nowT, 200, "unknown package"},
		{"unknown account", checkoutEvent("checkout.session.completed", "cs_test_unknownacct", "acct_0000000000000000", "paid", "10", 200), testWebhookSecret, nowT, 200, "unknown account"},
		{"other event type", checkoutEvent("checkout.session.expired", "cs_test_expired", acct.ID, "unpaid", "10", 200), testWebhookSecret, nowT, 200, "event type"},
		{"async payment pending", asyncPending, testWebhookSecret, nowT, 200, "not paid"},
		{"async payment succeeded", asyncPaid, testWebhookSecret, nowT, 200, "credited"},
		{"async payment succeeded, replayed", asyncPaid, testWebhookSecret, nowT, 200, "duplicate"},
		{"paid less than the package", checkoutEvent("checkout.session.completed", "cs_test_cheap", acct.ID, "paid", "10", 199), testWebhookSecret, nowT, 200, "amount differs"},
		{"paid more than the package", checkoutEvent("checkout.session.completed", "cs_test_dear", acct.ID, "paid", "10", 201), testWebhookSecret, nowT, 200, "amount differs"},
		{"paid in another currency", checkoutEventIn("checkout.session.completed", "cs_test_usd", acct.ID, "paid", "10", 200, "usd", nil), testWebhookSecret, nowT, 200, "amount differs"},
		{"paid the price the session was created for", checkoutEventIn("checkout.session.completed", "cs_test_oldprice", acct.ID, "paid", "10", 150, "eur",
			map[string]string{"credits": "8", "price_cents": "150"}), testWebhookSecret, nowT, 200, "credited"},
		{"paid the current price of a session created for another", checkoutEventIn("checkout.session.completed", "cs_test_newprice", acct.ID, "paid", "10", 200, "eur",
			map[string]string{"credits": "8", "price_cents": "150"}), testWebhookSecret, nowT, 200, "amount differs"},
	}
	for _, c := range cases {
		status, body := deliver(t, url, c.payload, c.secret, c.at)
		if status != c.status || !strings.Contains(body, c.reply) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, status, body, c.status, c.reply)
		}
	}

	// Tampered body with the original signature, no signature, garbage signature.
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: paid1, Secret: testWebhookSecret})
	tampered := []byte(strings.Replace(string(paid1), `"amount_total":200`, `"amount_total":1`, 1))
	if status, _ := deliverHeader(t, url, tampered, sp.Header); status != 400 {
		t.Errorf("tampered body: %d", status)
	}
	if status, _ := deliverHeader(t, url, paid2, ""); status != 400 {
		t.Errorf("no signature: %d", status)
	}
	if status, _ := deliverHeader(t, url, paid2, "t=abc,v1=zz"); status != 400 {
		t.Errorf("garbage signature: %d", status)
	}
	if status, _ := deliverHeader(t, url, []byte(strings.Repeat("x", maxWebhookBody+10)), sp.Header); status != 413 {
		t.Errorf("huge body: %d", status)
	}

	// Each paid session credited exactly once; nothing else credited.
	got := purchasesOf(t, e.store, acct.ID)
	want := map[string]int{"cs_test_paid1": 1, "cs_test_paid2": 1, "cs_test_async": 1, "cs_test_oldprice": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("purchases %v, want %v", got, want)
	}
	bal, _ := e.store.Balance(bg, acct.ID)
	if bal.Balance != 10+50+10+8 {
		t.Fatalf("balance %+v, want 78", bal)
	}
	ps, _ := e.store.Purchases(bg, acct.ID, 10)
	for _, p := range ps {
		if p.Currency != "EUR" || p.Kind != ledger.KindPurchase || p.Mode != ledger.Live || (p.AmountCents != 200 && p.AmountCents != 900 && p.AmountCents != 150) {
			t.Errorf("purchase entry %+v", p)
		}
	}
	if rep, err := e.store.Verify(bg); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}

	// Each paid session that credited nothing is kept once, for the operator, with why.
	unmatched, err := e.store.UnmatchedPayments(bg, true, 100)
	if err != nil {
		t.Fatal(err)
	}
	problems := map[string]string{}
	for _, p := range unmatched {
		if _, dup := problems[p.Reference]; dup {
			t.Errorf("unmatched payment %s kept twice", p.Reference)
		}
		problems[p.Reference] = p.Problem
		if p.Event == "" || p.Created.IsZero() || !p.Resolved.IsZero() {
			t.Errorf("unmatched payment %+v: want its event, a creation time and no resolution", p)
		}
	}
	wantProblems := map[string]string{
		"cs_test_unknownpkg":  ledger.ProblemUnknownPackage,
		"cs_test_unknownacct": ledger.ProblemUnknownAccount,
		"cs_test_cheap":       ledger.ProblemAmountMismatch,
		"cs_test_dear":        ledger.ProblemAmountMismatch,
		"cs_test_usd":         ledger.ProblemAmountMismatch,
		"cs_test_newprice":    ledger.ProblemAmountMismatch,
	}
	if fmt.Sprint(problems) != fmt.Sprint(wantProblems) {
		t.Fatalf("unmatched payments %v, want %v", problems, wantProblems)
	}
	for _, p := range unmatched {
		switch p.Reference {
		case "cs_test_cheap":
			if p.AccountID != acct.ID || p.Package != "10" || p.Credits != 10 || p.AmountCents != 199 || p.Currency != "eur" ||
				!strings.Contains(p.Detail, "paid 199 EUR cents") || !strings.Contains(p.Detail, "costs 200 EUR cents for 10 credits") {
				t.Errorf("the payment of too little: %+v", p)
			}
		case "cs_test_newprice":
			if p.Credits != 8 || !strings.Contains(p.Detail, "costs 150 EUR cents for 8 credits") {
				t.Errorf("the session created for the old price: %+v", p)
			}
		case "cs_test_unknownacct":
			if p.AccountID != "acct_0000000000000000" || p.AmountCents != 200 {
				t.Errorf("the payment for no account: %+v", p)
			}
		}
	}
	// Stripe delivers at least once: the same unmatched session again keeps nothing new.
	cheap := checkoutEvent("checkout.session.completed", "cs_test_cheap", acct.ID, "paid", "10", 199)
	if status, body := deliver(t, url, cheap, testWebhookSecret, time.Now()); status != 200 || !strings.Contains(body, "amount differs") {
		t.Fatalf("the payment of too little again: %d %s", status, body)
	}
	if again, _ := e.store.UnmatchedPayments(bg, false, 100); len(again) != len(unmatched) {
		t.Fatalf("after a replay %d unmatched payments, want %d", len(again), len(unmatched))
	}
}

// TestWebhookConcurrentRetries delivers one paid session many times at once (Stripe may
// retry while the first delivery is still running): it is credited once.
func TestWebhookConcurrentRetries(t *testing.T) {
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret))
	acct, _ := e.store.CreateAccount(bg, "concurrent@example.com")
	payload := checkoutEvent("checkout.session.completed", "cs_test_concurrent", acct.ID, "paid", "10", 200)
	var wg sync.WaitGroup
	var mu sync.Mutex
	replies := map[string]int{}
	for range 16 {
		wg.Go(func() {
			status, body := deliver(t, e.srv.URL+"/account/stripe/webhook", payload, testWebhookSecret, time.Now())
			mu.Lock()
			replies[fmt.Sprintf("%d %s", status, strings.TrimSpace(body))]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if replies[`200 {"status":"credited"}`] != 1 || replies[`200 {"status":"duplicate: credited before"}`] != 15 {
		t.Fatalf("replies %v", replies)
	}
	if bal, _ := e.store.Balance(bg, acct.ID); bal.Balance != 10 {
		t.Fatalf("balance %+v", bal)
	}
}

// TestWebhookLedgerFailureAnswers500 checks that a paid session is not acknowledged when the
// credit could not be made durable, so that Stripe retries it, and that the retry credits it.
func TestWebhookLedgerFailureAnswers500(t *testing.T) {
	dir := t.TempDir()
	store, err := badgerledger.Open(dir, badgerledger.Options{SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	acct, _ := store.CreateAccount(bg, "retry@example.com")
	e := newTestEnvOn(t, store, withStripe("http://127.0.0.1:1", testWebhookSecret))
	payload := checkoutEvent("checkout.session.completed", "cs_test_retry", acct.ID, "paid", "10", 200)
	url := e.srv.URL + "/account/stripe/webhook"

	// A paid session of another amount, which credits nothing but must be kept for the
	// operator: it too is acknowledged only once kept.
	cheap := checkoutEvent("checkout.session.completed", "cs_test_retry_cheap", acct.ID, "paid", "10", 150)

	store.Close() // the ledger is gone: every write fails
	if status, body := deliver(t, url, payload, testWebhookSecret, time.Now()); status != http.StatusInternalServerError {
		t.Fatalf("delivery while the ledger is down: %d %s, want 500", status, body)
	}
	if status, body := deliver(t, url, cheap, testWebhookSecret, time.Now()); status != http.StatusInternalServerError {
		t.Fatalf("delivery of an unmatched payment while the ledger is down: %d %s, want 500", status, body)
	}

	// Stripe retries once the ledger is back.
	store2, err := badgerledger.Open(dir, badgerledger.Options{SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store2.Close()
	e2 := newTestEnvOn(t, store2, withStripe("http://127.0.0.1:1", testWebhookSecret))
	if status, body := deliver(t, e2.srv.URL+"/account/stripe/webhook", payload, testWebhookSecret, time.Now()); status != 200 || !strings.Contains(body, "credited") {
		t.Fatalf("retry: %d %s", status, body)
	}
	if got := purchasesOf(t, store2, acct.ID); got["cs_test_retry"] != 1 || len(got) != 1 {
		t.Fatalf("purchases after the retry: %v", got)
	}
	if status, body := deliver(t, e2.srv.URL+"/account/stripe/webhook", cheap, testWebhookSecret, time.Now()); status != 200 || !strings.Contains(body, "amount differs") {
		t.Fatalf("retry of the unmatched payment: %d %s", status, body)
	}
	if ps, err := store2.UnmatchedPayments(bg, true, 10); err != nil || len(ps) != 1 || ps[0].Reference != "cs_test_retry_cheap" {
		t.Fatalf("unmatched payments after the retry: %+v %v", ps, err)
	}
}
