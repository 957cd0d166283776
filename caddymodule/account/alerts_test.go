package account

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// The alerts to the customer's own systems, end to end: an endpoint registered through the
// Alerts page, events raised where they happen, and a real HTTPS receiver (httptest's TLS
// server) that checks each signature with the secret the page showed.

// withAlerts turns alerts on, trusting the certificate of roots (the test receiver's: the
// test-only hook, alerter.roots), and allowing private endpoints when allowPrivate.
func withAlerts(t *testing.T, allowPrivate bool, roots *x509.CertPool) envOpt {
	s, err := sealing.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return func(c *appConfig) { c.alerts = &alerter{sealer: s, allowPrivate: allowPrivate, roots: roots} }
}

// alertClockEnv is an account area whose clock, and its ledger's, the test moves (at).
func alertClockEnv(t *testing.T, opts ...envOpt) (*testEnv, *atomic.Pointer[time.Time]) {
	var at atomic.Pointer[time.Time]
	t0 := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	at.Store(&t0)
	setClock(t, &at)
	old := alertPoll
	alertPoll = time.Hour // the test drives retries by moving the clock
	t.Cleanup(func() { alertPoll = old })
	store, err := badgerledger.Open("", badgerledger.Options{InMemory: true, SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1,
		Now: func() time.Time { return now() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return newTestEnvOn(t, store, opts...), &at
}

func advance(at *atomic.Pointer[time.Time], d time.Duration) {
	t := at.Load().Add(d)
	at.Store(&t)
}

// receiver is a real HTTPS endpoint that checks every event's signature with its secret,
// fails the first failFirst deliveries with 500, and keeps each event once by its id.
type receiver struct {
	srv       *httptest.Server
	mu        sync.Mutex
	secret    string
	failFirst int
	calls     int
	badSig    int
	events    map[string]alertEvent
	repeats   int
}

func newReceiver(t *testing.T, failFirst int) *receiver {
	rc := &receiver{failFirst: failFirst, events: map[string]alertEvent{}}
	rc.srv = httptest.NewTLSServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(rc.srv.Certificate())
	return p
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.calls++
	if !verifySignature(rc.secret, r.Header.Get("Textgen-Signature"), body) {
		rc.badSig++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if rc.calls <= rc.failFirst {
		http.Error(w, "down for a while", http.StatusInternalServerError)
		return
	}
	var ev alertEvent
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID != r.Header.Get("Textgen-Event-Id") {
		http.Error(w, "bad event", http.StatusBadRequest)
		return
	}
	if _, ok := rc.events[ev.ID]; ok {
		rc.repeats++ // at least once: a repeat is dropped by its id
	}
	rc.events[ev.ID] = ev
	w.WriteHeader(http.StatusNoContent)
}

// verifySignature is what docs/API.md tells a receiver to do.
func verifySignature(secret, header string, body []byte) bool {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	want := hex.EncodeToString(m.Sum(nil))
	return ts != "" && hmac.Equal([]byte(sig), []byte(want))
}

func (rc *receiver) snapshot() (calls, badSig, repeats int, events map[string]alertEvent) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ev := map[string]alertEvent{}
	for k, v := range rc.events {
		ev[k] = v
	}
	return rc.calls, rc.badSig, rc.repeats, ev
}

var secretRe = regexp.MustCompile(`id="secret">(whsec_[A-Za-z0-9]+)<`)

// addEndpoint registers url through the Alerts page and returns the secret it showed.
func addEndpoint(t *testing.T, b *browser, url string, kinds ...string) string {
	t.Helper()
	fields := []string{"csrf_token", b.csrf("/account/webhooks"), "url", url}
	for _, k := range kinds {
		fields = append(fields, "kind", k)
	}
	r := b.post("/account/webhooks", fields...)
	expectStatus(t, "adding an endpoint", r, http.StatusOK)
	m := secretRe.FindStringSubmatch(r.body)
	if m == nil {
		t.Fatalf("no secret shown:\n%s", r.body)
	}
	if again := b.get("/account/webhooks"); strings.Contains(again.body, m[1]) {
		t.Fatal("the secret is shown a second time")
	}
	return m[1]
}

// deliverNow runs one round of the sender, as its loop does.
func deliverNow(e *testEnv) { e.app.deliverAlerts(bg, e.app.alertClient()) }

// deliveries lists the account's deliveries, waiting (with a deadline) until none is leased,
// since the sender's own loop may be delivering one.
func deliveries(t *testing.T, e *testEnv, acct string) []ledger.AlertDelivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, err := e.store.ListAlertDeliveries(bg, acct, 0)
		if err != nil {
			t.Fatal(err)
		}
		busy := false
		for _, d := range ds {
			busy = busy || d.LeaseUntil.After(now())
		}
		if !busy || time.Now().After(deadline) {
			return ds
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAlertsDeliveredSignedThroughFailures: a receiver that answers 500 twice, then recovers,
// gets every event once, each signed with the secret the page showed: a low-balance crossing
// found by the real check, a purchase raised twice (one event), and a refund.
func TestAlertsDeliveredSignedThroughFailures(t *testing.T) {
	rc := newReceiver(t, 2)
	e, at := alertClockEnv(t, withAlerts(t, true, rc.roots()))
	b := e.browser()
	acct := b.signup(uniqueEmail("alerts"))
	rc.mu.Lock()
	rc.secret = addEndpoint(t, b, rc.srv.URL+"/hook")
	rc.mu.Unlock()
	if eps, _ := e.store.ListAlertEndpoints(bg, acct.ID); len(eps) != 1 || bytes.Contains(eps[0].SealedSecret, []byte(rc.secret)) {
		t.Fatalf("endpoints %+v: want one, its secret sealed", eps)
	}

	// Events: a real low-balance crossing, a purchase raised twice, a refund.
	if _, err := e.store.SetLowBalanceAlert(bg, acct.ID, 5); err != nil {
		t.Fatal(err)
	}
	e.app.checkLowBalances(bg)
	for range 2 {
		if err := e.app.raiseAlert(bg, acct.ID, ledger.AlertPurchaseCompleted, "cs_test_1", map[string]any{"credits": 10}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.app.raiseAlert(bg, acct.ID, ledger.AlertRefundCreated, "re_1\x00applied", map[string]any{"credits": 10}); err != nil {
		t.Fatal(err)
	}
	deliverNow(e)
	ds := deliveries(t, e, acct.ID)
	if len(ds) != 3 {
		t.Fatalf("%d deliveries; want 3 (the repeated purchase once)", len(ds))
	}
	// Two refusals, retried after a minute and then two more; then everything arrives.
	for i := 0; i < 10; i++ {
		if _, _, _, evs := rc.snapshot(); len(evs) == 3 {
			break
		}
		advance(at, alertRetryMax)
		deliverNow(e)
		deliveries(t, e, acct.ID)
	}
	calls, badSig, _, evs := rc.snapshot()
	if badSig != 0 || len(evs) != 3 || calls < 5 {
		t.Fatalf("receiver: %d calls, %d bad signatures, %d events; want every event, all signed", calls, badSig, len(evs))
	}
	kinds := map[string]bool{}
	for id, ev := range evs {
		kinds[ev.Type] = true
		if ev.Account != acct.ID || !strings.HasPrefix(id, "evt_") || ev.Created == 0 {
			t.Fatalf("event %+v", ev)
		}
	}
	if !kinds[ledger.AlertBalanceLow] || !kinds[ledger.AlertPurchaseCompleted] || !kinds[ledger.AlertRefundCreated] {
		t.Fatalf("event types %v", kinds)
	}
	for _, d := range deliveries(t, e, acct.ID) {
		if d.State != ledger.AlertDelivered || d.LastStatus != http.StatusNoContent {
			t.Fatalf("delivery %+v", d)
		}
	}
	page := b.get("/account/webhooks")
	mustContain(t, "the Alerts page", page.body, "delivered", "balance.low", "purchase.completed", rc.srv.URL+"/hook")
}

// TestAlertsGivenUpAfterADay: an endpoint that is down for good is tried with back-off for a
// day, then given up, and the Alerts page shows it failed.
func TestAlertsGivenUpAfterADay(t *testing.T) {
	rc := newReceiver(t, 0)
	e, at := alertClockEnv(t, withAlerts(t, true, rc.roots()))
	b := e.browser()
	email := uniqueEmail("down")
	acct := b.signup(email)
	addEndpoint(t, b, rc.srv.URL+"/hook", ledger.AlertPurchaseCompleted)
	rc.srv.Close() // down for good
	if err := e.app.raiseAlert(bg, acct.ID, ledger.AlertPurchaseCompleted, "cs_down", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	deliverNow(e)
	if ds := deliveries(t, e, acct.ID); len(ds) != 1 || ds[0].State != ledger.AlertPending || ds[0].Attempts != 1 || ds[0].LastError == "" ||
		!ds[0].NextAttempt.Equal(now().Add(alertRetryBase)) {
		t.Fatalf("after the first failure: %+v", ds)
	}
	mustContain(t, "the Alerts page", b.get("/account/webhooks").body, "retrying (attempt 1 failed")
	start := now()
	for now().Sub(start) < 23*time.Hour {
		advance(at, 30*time.Minute)
		deliverNow(e)
		if ds := deliveries(t, e, acct.ID); ds[0].State != ledger.AlertPending {
			t.Fatalf("given up before the day was out, at %s: %+v", now().Sub(start), ds[0])
		}
	}
	advance(at, 2*time.Hour)
	deliverNow(e)
	ds := deliveries(t, e, acct.ID)
	if ds[0].State != ledger.AlertFailed || ds[0].Attempts < 20 || ds[0].Attempts > 40 {
		t.Fatalf("after a day: %+v; want failed after back-off of a minute doubling to an hour", ds[0])
	}
	b.login(email, testPassword) // the session of a day ago has ended
	mustContain(t, "the Alerts page", b.get("/account/webhooks").body, "failed (given up after")
}

// TestAlertsWrongSignatureNotDelivered: a receiver that checks signatures with another secret
// refuses every delivery, which stays undelivered (what a wrong signing key would do).
func TestAlertsWrongSignatureNotDelivered(t *testing.T) {
	rc := newReceiver(t, 0)
	e, _ := alertClockEnv(t, withAlerts(t, true, rc.roots()))
	b := e.browser()
	acct := b.signup(uniqueEmail("sig"))
	secret := addEndpoint(t, b, rc.srv.URL+"/hook")
	rc.mu.Lock()
	rc.secret = secret + "x"
	rc.mu.Unlock()
	if err := e.app.raiseAlert(bg, acct.ID, ledger.AlertBalanceLow, "k", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	deliverNow(e)
	calls, badSig, _, evs := rc.snapshot()
	if calls == 0 || badSig != calls || len(evs) != 0 {
		t.Fatalf("%d calls, %d bad signatures, %d events", calls, badSig, len(evs))
	}
	if ds := deliveries(t, e, acct.ID); ds[0].State != ledger.AlertPending || ds[0].LastStatus != http.StatusUnauthorized {
		t.Fatalf("delivery %+v", ds[0])
	}
}

// TestAlertsPrivateEndpointsRefused: without allow_private_endpoints, the page refuses
// endpoints on private, loopback and reserved addresses and plain http; and an endpoint that
// reaches such an address anyway (a name that resolved elsewhere when it was registered) is
// refused when the sender dials it: the receiver on 127.0.0.1 gets nothing.
func TestAlertsPrivateEndpointsRefused(t *testing.T) {
	rc := newReceiver(t, 0)
	e, _ := alertClockEnv(t, withAlerts(t, false, rc.roots()))
	b := e.browser()
	acct := b.signup(uniqueEmail("ssrf"))
	for url, msg := range map[string]string{
		rc.srv.URL + "/hook":                   "private, loopback or reserved",
		"https://10.1.2.3/hook":                "private, loopback or reserved",
		"https://169.254.169.254/latest":       "private, loopback or reserved",
		"https://[::ffff:127.0.0.1]/x":         "private, loopback or reserved",
		"https://100.64.0.1/x":                 "private, loopback or reserved",
		"https://localhost/x":                  "private, loopback or reserved",
		"http://example.com/hook":              "must start with https://",
		"https://user:pw@example.com/hook":     "user name or password",
		"https://no-such-host.invalid/textgen": "could not be found",
	} {
		r := b.post("/account/webhooks", "csrf_token", b.csrf("/account/webhooks"), "url", url)
		expectStatus(t, url, r, http.StatusBadRequest)
		mustContain(t, url, r.body, msg)
	}
	if eps, _ := e.store.ListAlertEndpoints(bg, acct.ID); len(eps) != 0 {
		t.Fatalf("endpoints were registered: %+v", eps)
	}
	// Registered behind the page's back, as a name that now resolves to 127.0.0.1 would be.
	if _, err := e.store.CreateAlertEndpoint(bg, ledger.AlertEndpoint{AccountID: acct.ID, URL: rc.srv.URL + "/hook",
		SealedSecret: e.app.alerts.sealer.Seal([]byte("whsec_x"), alertSecretAD(acct.ID))}); err != nil {
		t.Fatal(err)
	}
	if err := e.app.raiseAlert(bg, acct.ID, ledger.AlertBalanceLow, "k", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	deliverNow(e)
	if calls, _, _, _ := rc.snapshot(); calls != 0 {
		t.Fatalf("the receiver on a loopback address got %d calls", calls)
	}
	if ds := deliveries(t, e, acct.ID); len(ds) != 1 || !strings.Contains(ds[0].LastError, "private") {
		t.Fatalf("delivery %+v; want refused as private", ds)
	}
}

// TestBlockedAddr: the ranges the guard refuses, and public ones it lets through.
func TestBlockedAddr(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
		"224.0.0.1", "255.255.255.255", "::1", "::", "fc00::1", "fd12::1", "fe80::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
		"64:ff9b::a00:1", "198.18.0.1"} {
		if !blockedAddr(netip.MustParseAddr(s)) {
			t.Errorf("%s is not blocked", s)
		}
	}
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "100.128.0.1"} {
		if blockedAddr(netip.MustParseAddr(s)) {
			t.Errorf("%s is blocked", s)
		}
	}
}

// TestAlertsOffAndMembers: with alerts off the page says so and adds nothing; nothing is queued.
func TestAlertsOff(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	acct := b.signup(uniqueEmail("off"))
	mustContain(t, "the Alerts page", b.get("/account/webhooks").body, "sends no alerts")
	r := b.post("/account/webhooks", "csrf_token", b.csrf("/account/webhooks"), "url", "https://example.com/hook")
	expectStatus(t, "adding with alerts off", r, http.StatusForbidden)
	if err := e.app.raiseAlert(bg, acct.ID, ledger.AlertBalanceLow, "k", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	if ds, _ := e.store.ListAlertDeliveries(bg, acct.ID, 0); len(ds) != 0 {
		t.Fatalf("queued %+v with alerts off", ds)
	}
}

// TestAlertsKeyBudgetCrossings: the periodic check raises key.budget_80 once the key has spent
// 80% of its daily budget and key.budget_100 once it has spent it, each once however often the
// check runs, and again the next day only when it is crossed again.
func TestAlertsKeyBudgetCrossings(t *testing.T) {
	rc := newReceiver(t, 0)
	e, at := alertClockEnv(t, withAlerts(t, true, rc.roots()))
	b := e.browser()
	acct := b.signup(uniqueEmail("budget"))
	rc.mu.Lock()
	rc.secret = addEndpoint(t, b, rc.srv.URL+"/hook", ledger.AlertKeyBudget80, ledger.AlertKeyBudget100)
	rc.mu.Unlock()
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 100, Reference: "budget-grant"})
	_, k, err := e.store.CreateKey(bg, acct.ID, ledger.Live, "ci", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.UpdateKey(bg, acct.ID, k.ID, ledger.KeySettings{Name: "ci", Limits: ledger.KeyLimits{BudgetDay: 10}}); err != nil {
		t.Fatal(err)
	}
	spend := func(n int, day string) {
		for i := range n {
			rid := fmt.Sprintf("req-%s-%d-%d", day, n, i)
			if _, err := e.store.Hold(bg, ledger.HoldRequest{AccountID: acct.ID, Mode: ledger.Live, RequestID: rid, KeyID: k.ID}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Settle(bg, acct.ID, rid); err != nil {
				t.Fatal(err)
			}
		}
	}
	types := func() map[string]int {
		e.app.checkAlertCrossings(bg)
		e.app.checkAlertCrossings(bg) // a second run raises nothing more
		deliverNow(e)
		deliveries(t, e, acct.ID)
		_, bad, repeats, evs := rc.snapshot()
		if bad != 0 || repeats != 0 {
			t.Fatalf("%d bad signatures, %d repeats", bad, repeats)
		}
		out := map[string]int{}
		for _, ev := range evs {
			out[ev.Type]++
		}
		return out
	}
	spend(7, "d1")
	if got := types(); len(got) != 0 {
		t.Fatalf("at 70%%: %v", got)
	}
	spend(1, "d1")
	if got := types(); got[ledger.AlertKeyBudget80] != 1 || len(got) != 1 {
		t.Fatalf("at 80%%: %v", got)
	}
	spend(2, "d1")
	if got := types(); got[ledger.AlertKeyBudget80] != 1 || got[ledger.AlertKeyBudget100] != 1 {
		t.Fatalf("at 100%%: %v", got)
	}
	advance(at, 24*time.Hour) // a new day: nothing spent yet
	if got := types(); got[ledger.AlertKeyBudget80] != 1 || got[ledger.AlertKeyBudget100] != 1 {
		t.Fatalf("the next day, before spending: %v", got)
	}
	spend(8, "d2")
	if got := types(); got[ledger.AlertKeyBudget80] != 2 {
		t.Fatalf("the next day at 80%%: %v", got)
	}
}

// TestAlertsFromStripeWebhooks: a purchase credited through the Stripe webhook (delivered twice),
// a dispute opened and won, and a refund raise purchase.completed, dispute.created,
// dispute.closed and refund.created, each once, with what the account holder needs in data.
func TestAlertsFromStripeWebhooks(t *testing.T) {
	rc := newReceiver(t, 0)
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret), withAlerts(t, true, rc.roots()))
	b := e.browser()
	acct := b.signup(uniqueEmail("stripe-alerts"))
	rc.mu.Lock()
	rc.secret = addEndpoint(t, b, rc.srv.URL+"/hook")
	rc.mu.Unlock()
	buyThrough(t, e, acct.ID, "cs_test_alert1")
	hook(t, e, checkoutEvent("checkout.session.completed", "cs_test_alert1", acct.ID, "paid", "10", 200), 200, "duplicate")
	buyThrough(t, e, acct.ID, "cs_test_alert2")
	pi1, pi2 := paymentIntentOf("cs_test_alert1"), paymentIntentOf("cs_test_alert2")
	hook(t, e, disputeEvent("charge.dispute.created", "du_test_alert", pi1, 200, "needs_response"), 200, "dispute open")
	hook(t, e, disputeEvent("charge.dispute.closed", "du_test_alert", pi1, 200, "won"), 200, "dispute won")
	hook(t, e, refundEvent("refund.created", "re_test_alert", pi2, 200, "succeeded"), 200, "refund applied")
	deadline := time.Now().Add(10 * time.Second)
	for {
		deliverNow(e)
		if _, _, _, evs := rc.snapshot(); len(evs) >= 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, bad, repeats, evs := rc.snapshot()
	got := map[string]int{}
	for _, ev := range evs {
		got[ev.Type]++
		data, _ := ev.Data.(map[string]any)
		if ev.Type == ledger.AlertPurchaseCompleted && (data["credits"] != 10.0 || data["amount_cents"] != 200.0) {
			t.Fatalf("purchase event %+v", ev)
		}
	}
	want := map[string]int{ledger.AlertPurchaseCompleted: 2, ledger.AlertDisputeCreated: 1, ledger.AlertDisputeClosed: 1, ledger.AlertRefundCreated: 1}
	if bad != 0 || repeats != 0 || len(got) != len(want) {
		t.Fatalf("events %v (%d bad signatures, %d repeats); want %v", got, bad, repeats, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("events %v; want %v", got, want)
		}
	}
}

// TestAlertsMemberCap: an organisation's member who uses their monthly cap raises
// member.cap_reached once that month, however often the check runs.
func TestAlertsMemberCap(t *testing.T) {
	rc := newReceiver(t, 0)
	e, _ := alertClockEnv(t, withAlerts(t, true, rc.roots()))
	b := e.browser()
	org := b.signup(uniqueEmail("capped-org"))
	rc.mu.Lock()
	rc.secret = addEndpoint(t, b, rc.srv.URL+"/hook", ledger.AlertMemberCapReached)
	rc.mu.Unlock()
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: org.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 10, Reference: "cap-grant"})
	member, err := e.store.CreateAccount(bg, uniqueEmail("capped-member"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.MakeOrganisation(bg, org.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.AddMember(bg, org.ID, member.ID, ledger.RoleMember, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SetMemberCap(bg, org.ID, member.ID, 2); err != nil {
		t.Fatal(err)
	}
	_, k, err := e.store.CreateMemberKey(bg, org.ID, member.ID, ledger.Live, "member's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		e.app.checkAlertCrossings(bg)
		rid := fmt.Sprintf("cap-%d", i)
		if _, err := e.store.Hold(bg, ledger.HoldRequest{AccountID: org.ID, Mode: ledger.Live, RequestID: rid, KeyID: k.ID}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Settle(bg, org.ID, rid); err != nil {
			t.Fatal(err)
		}
	}
	e.app.checkAlertCrossings(bg)
	e.app.checkAlertCrossings(bg)
	deliverNow(e)
	deliveries(t, e, org.ID)
	_, bad, repeats, evs := rc.snapshot()
	if bad != 0 || repeats != 0 || len(evs) != 1 {
		t.Fatalf("%d events (%d bad signatures, %d repeats): %+v", len(evs), bad, repeats, evs)
	}
	for _, ev := range evs {
		data, _ := ev.Data.(map[string]any)
		if ev.Type != ledger.AlertMemberCapReached || data["member_id"] != member.ID || data["used"] != 2.0 {
			t.Fatalf("event %+v", ev)
		}
	}
}

// TestAlertsTopUpFailed: a declined automatic top-up raises topup.failed, once, though Stripe's
// late payment_intent.payment_failed reports it again.
func TestAlertsTopUpFailed(t *testing.T) {
	sm := realStripeMock(t)
	rec := newIntentRecorder(t, sm.URL)
	rc := newReceiver(t, 0)
	e := newTestEnv(t, withTopUp(rec), withAlerts(t, true, rc.roots()))
	b := e.browser()
	acct := b.signup(uniqueEmail("topup-alert"))
	rc.mu.Lock()
	rc.secret = addEndpoint(t, b, rc.srv.URL+"/hook", ledger.AlertTopupFailed, ledger.AlertTopupSucceeded)
	rc.mu.Unlock()
	if _, err := e.store.SaveTopUpCard(bg, acct.ID, ledger.TopUpCard{CustomerID: "cus_1", PaymentMethodID: "pm_card_chargeDeclined"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SetTopUpRule(bg, acct.ID, ledger.TopUpSettings{Threshold: 5, Package: "10", MonthlyCap: 3, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	rec.decline.Store(true)
	e.app.topUp(bg, acct.ID)
	tu := waitTopUp(t, e.store, acct.ID)
	if status, body := deliver(t, e.srv.URL+"/account/stripe/webhook", intentEvent("payment_intent.payment_failed", "pi_declined", tu, "10", 200), testWebhookSecret, time.Now()); status != 200 {
		t.Fatalf("failed webhook: %d %s", status, body)
	}
	deliverNow(e)
	deliveries(t, e, acct.ID)
	_, bad, repeats, evs := rc.snapshot()
	if bad != 0 || repeats != 0 || len(evs) != 1 {
		t.Fatalf("%d events (%d bad signatures, %d repeats): %+v", len(evs), bad, repeats, evs)
	}
	for _, ev := range evs {
		data, _ := ev.Data.(map[string]any)
		if ev.Type != ledger.AlertTopupFailed || data["id"] != tu.ID || data["package"] != "10" {
			t.Fatalf("event %+v", ev)
		}
	}
}
