package account

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/caddy-textgen/textgen/caddymodule/internal/browsertest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/receipts"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// The in-process Caddy's ports, picked free in TestMain.
var (
	caddyAdminPort, caddyHTTPPort, caddyHTTPSPort int
	caddyBase                                     string
)

// newChromium starts a headless Chromium with a fresh profile; it ends with the test, and every
// step under its context within 4 minutes.
func newChromium(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(browsertest.Start(t), 4*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openLedger joins the ledger of dir that the loaded config holds open; release gives it back
// (once, however often it is called).
func openLedger(t *testing.T, dir string) (store ledger.Store, release func() error) {
	t.Helper()
	abs, _ := filepath.Abs(dir)
	ref, err := textgenapp.AcquireLedger(abs, badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err = ref.Get()
	if err != nil {
		ref.Release()
		t.Fatal(err)
	}
	return store, sync.OnceValue(ref.Release)
}

// artifactsDir empties and returns testdata/artifacts/<name>, where a test's screenshots go.
func artifactsDir(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join("testdata", "artifacts", name)
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

var caddyOnce sync.Once

// startCaddy runs the in-process Caddy with only its admin endpoint on caddyAdminPort, so that
// caddytest finds it running and never takes its skip path.
func startCaddy(t *testing.T) {
	t.Helper()
	var err error
	caddyOnce.Do(func() {
		err = caddy.Load([]byte(fmt.Sprintf(`{"admin":{"listen":"localhost:%d"}}`, caddyAdminPort)), true)
	})
	if err != nil {
		t.Fatalf("starting the in-process Caddy on admin port %d: %v", caddyAdminPort, err)
	}
}

// loadCaddyfile loads a config into the in-process Caddy.
func loadCaddyfile(t *testing.T, cfg string) {
	t.Helper()
	startCaddy(t)
	tester := caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{
		AdminPort: caddyAdminPort, LoadRequestTimeout: 30 * time.Second, TestRequestTimeout: 2 * time.Minute,
	})
	tester.InitServer(cfg, "caddyfile")
	if t.Failed() {
		t.Fatal("the Caddy config did not load")
	}
}

type shooter struct {
	t   *testing.T
	ctx context.Context
	dir string
	n   int
}

// do runs browser steps, failing the test with what they were for.
func (s *shooter) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	s.t.Helper()
	if err := chromedp.Do(s.ctx, steps...); err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

// text is the trimmed text of the element sel.
func (s *shooter) text(sel string) string {
	s.t.Helper()
	v, err := chromedp.Run(s.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		s.t.Fatalf("reading %s: %v", sel, err)
	}
	return strings.TrimSpace(v)
}

// shot checks the current page with axe-core and that it fits a phone's (390 px) and a
// desktop's (1280 px) width: nothing scrolls sideways, every link, button and field (a table's
// actions too) in view. It saves a full-page PNG at each width as
// testdata/artifacts/<NN>-<name>-<width>.png, and leaves the desktop's width set.
func (s *shooter) shot(name string) {
	s.t.Helper()
	ours := !strings.HasPrefix(name, "stripe-") // Stripe's page is not ours to check
	if ours {
		checkAccessibility(s.t, s.ctx, name)
	}
	s.n++
	for _, w := range browsertest.Widths {
		s.do("viewport "+w.Name, w.Viewport)
		if ours {
			browsertest.CheckFits(s.t, s.ctx, name, w.Name)
		}
		png, err := chromedp.Run(s.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			s.t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join(s.dir, fmt.Sprintf("%02d-%s-%s.png", s.n, name, w.Name))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			s.t.Fatal(err)
		}
		abs, _ := filepath.Abs(path)
		s.t.Logf("screenshot: %s", abs)
	}
}

func TestBrowserSignUpKeyGenerateBuy(t *testing.T) {
	browsertest.Path(t) // fails early, saying how to install it
	ollama := realOllama(t)
	rec := newStripeRecorder(t, realStripeMock(t).URL)

	dir, err := os.MkdirTemp(testRoot, "ledger-")
	if err != nil {
		t.Fatal(err)
	}
	// The Stripe secrets reach the config as environment placeholders, as in production.
	t.Setenv("TEXTGEN_TEST_STRIPE_KEY", "sk_test_browser")
	t.Setenv("TEXTGEN_TEST_WEBHOOK_SECRET", testWebhookSecret)
	loadCaddyfile(t, fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 5s
	skip_install_trust
}
http://127.0.0.1:%d {
	@textgen path /api/* /.well-known/textgen-receipt-keys
	textgen @textgen {
		ledger %s
		ollama %s
		model %s
		temperature 1
		max_output_tokens 16
	}
	textgen_account {
		ledger %s
		stripe_secret_key {env.TEXTGEN_TEST_STRIPE_KEY}
		stripe_webhook_secret {env.TEXTGEN_TEST_WEBHOOK_SECRET}
		stripe_api_url %s
		site_name "Textgen"
	}
	respond "not found" 404
}
`, caddyAdminPort, caddyHTTPPort, caddyHTTPSPort, caddyHTTPPort, dir, ollama.URL, ollama.Model, dir, rec.srv.URL))

	// The account area and the generate handler share one open ledger.
	store, release := openLedger(t, dir)
	defer release()

	artifacts := artifactsDir(t, "browser")

	ctx := newChromium(t)
	shots := &shooter{t: t, ctx: ctx, dir: artifacts}
	do, text := shots.do, shots.text
	desktop := chromedp.EmulateViewport(1280, 900)
	phone := chromedp.EmulateViewport(360, 800, chromedp.EmulateScale(2), chromedp.EmulateMobile)

	// Stripe Checkout is on the internet; the test stands in for it and records where the
	// browser was sent.
	checkoutURLs := make(chan string, 4)
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			checkoutURLs <- ev.Request.URL
			page := `<!doctype html><html lang="en"><head><meta name="viewport" content="width=device-width"><title>Stripe Checkout (test stand-in)</title></head>` +
				`<body style="font-family:sans-serif;padding:2rem"><h1 id="stand-in">Stripe Checkout</h1><p>Stand-in page of the test: Stripe is not reachable here.</p></body></html>`
			chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
				_, err := cdp.Call(ctx, tg, fetch.FulfillRequest, fetch.FulfillRequestParams{
					RequestID: ev.RequestID, ResponseCode: 200,
					ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "text/html; charset=utf-8"}},
					Body:            []byte(page),
				})
				return chromedp.Void{}, err
			})
		}
	}()
	do("intercepting Stripe Checkout", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "https://checkout.stripe.com/*"}}})
		return chromedp.Void{}, err
	})

	// Sign up (a weak password first: the error is shown next to the form).
	email := uniqueEmail("browser")
	do("sign-up page", desktop, chromedp.Navigate(caddyBase+"/account/signup"), chromedp.WaitVisible(chromedp.CSS("#email")))
	shots.shot("signup")
	do("weak password",
		chromedp.SendKeys(chromedp.CSS("#email"), email),
		chromedp.SetAttributeValue(chromedp.CSS("#password"), "minlength", "1"), // let the server judge
		chromedp.SendKeys(chromedp.CSS("#password"), "short"),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#form-error")))
	if msg := text("#form-error"); !strings.Contains(msg, "at least 10 characters") {
		t.Fatalf("weak password message %q", msg)
	}
	shots.shot("signup-weak-password")
	do("sign up",
		chromedp.SendKeys(chromedp.CSS("#password"), testPassword),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#live-credits")))
	if live, test := text("#live-credits"), text("#test-credits"); live != "0" || test != "50" {
		t.Fatalf("new dashboard: live %q, test %q", live, test)
	}
	shots.shot("dashboard-new")

	// Create a live key and read it from the page.
	do("keys page", chromedp.Navigate(caddyBase+"/account/keys"), chromedp.WaitVisible(chromedp.CSS("#key-name")))
	shots.shot("keys-empty")
	do("create key",
		chromedp.SendKeys(chromedp.CSS("#key-name"), "browser test"),
		chromedp.Click(chromedp.CSS(`form[action="/account/keys"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#new-key")))
	apiKey, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS("#new-key")))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ledger.CheckKeyFormat(apiKey); !ok || !strings.HasPrefix(apiKey, "tg_live_") {
		t.Fatalf("the page shows %q, not a live key", apiKey)
	}
	if w := text(".warning"); !strings.Contains(w, "You will not see it again") {
		t.Fatalf("warning %q", w)
	}
	// The copy button answers (clipboard or the selection fallback).
	do("copy", chromedp.Click(chromedp.CSS(`button[data-copy="new-key"]`)))
	var status string
	for range 50 {
		if status = text("#copy-status"); status != "" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status == "" {
		t.Fatal("the copy button did nothing")
	}
	shots.shot("key-created")

	// The key works on the API at once: no credits yet, so 402.
	res := generate(t, apiKey)
	if res.status != http.StatusPaymentRequired {
		t.Fatalf("generate without credits: %d %s", res.status, res.body)
	}
	// Its message names where to buy: this account area, found without a buy_url.
	if !strings.Contains(res.body, "buy a credit package (10 credits = 2.00 EUR) at /account/") {
		t.Fatalf("the 402 does not name the account area: %s", res.body)
	}

	// Buy a package: the browser goes to Stripe Checkout.
	do("buy page", chromedp.Navigate(caddyBase+"/account/buy"), chromedp.WaitVisible(chromedp.CSS(".package")))
	shots.shot("buy")
	do("buy", chromedp.Click(chromedp.CSS(`.package button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#stand-in")))
	var checkoutURL string
	select {
	case checkoutURL = <-checkoutURLs:
	case <-time.After(10 * time.Second):
		t.Fatal("the browser was not sent to Stripe Checkout")
	}
	created := rec.created()
	if len(created) != 1 || created[0].URL != checkoutURL {
		t.Fatalf("browser went to %q; Checkout Sessions created: %+v", checkoutURL, created)
	}
	cs := created[0]
	acct, err := store.GetAccountByEmail(bg, email)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Form.Get("client_reference_id") != acct.ID || cs.Form.Get("metadata[package]") != "10" {
		t.Fatalf("checkout session form %v", cs.Form)
	}
	shots.shot("stripe-checkout-stand-in")

	// The customer pays; Stripe delivers the signed webhook (twice, as it may) and sends the
	// browser back to the success page.
	paid := checkoutEvent("checkout.session.completed", cs.ID, acct.ID, "paid", "10", 200)
	for range 2 {
		if status, body := deliver(t, caddyBase+"/account/stripe/webhook", paid, testWebhookSecret, time.Now()); status != 200 {
			t.Fatalf("webhook: %d %s", status, body)
		}
	}
	successURL := strings.Replace(cs.Form.Get("success_url"), "{CHECKOUT_SESSION_ID}", cs.ID, 1)
	if !strings.HasPrefix(successURL, caddyBase+"/account/buy/success?session_id=cs_test_") {
		t.Fatalf("success URL %q", successURL)
	}
	do("success page", chromedp.Navigate(successURL), chromedp.WaitVisible(chromedp.CSS("#live-credits")))
	if got := text("#live-credits"); got != "10" {
		t.Fatalf("credits on the success page: %q", got)
	}
	shots.shot("buy-success")

	// Now the key generates text with the real Ollama, and is charged 1 credit.
	res = generate(t, apiKey)
	if res.status != http.StatusOK || res.header.Get("X-Credits-Used") != "1" || res.header.Get("X-Credits-Remaining") != "9" || len(res.body) == 0 {
		t.Fatalf("generate after buying: %d %v %q", res.status, res.header, res.body)
	}

	// The dashboard shows the balance, the request and the purchase.
	do("dashboard", chromedp.Navigate(caddyBase+"/account/"), chromedp.WaitVisible(chromedp.CSS("#live-credits")))
	if got := text("#live-credits"); got != "9" {
		t.Fatalf("dashboard credits %q, want 9", got)
	}
	requests, purchases := text("#requests-h + .table-wrap"), text("#purchases-h + .table-wrap")
	if !strings.Contains(requests, "summarizer") || !strings.Contains(requests, "charged") {
		t.Fatalf("latest requests: %q", requests)
	}
	if !strings.Contains(purchases, "€2.00") || !strings.Contains(purchases, cs.ID) {
		t.Fatalf("purchases: %q", purchases)
	}
	// The latest request shows its id, the one the API answered with.
	if rid := res.header.Get("X-Request-Id"); rid == "" || !strings.Contains(requests, rid) {
		t.Fatalf("latest requests %q lack the request id %q", requests, rid)
	}
	// The charts of the last 30 days, drawn on the server: today's bar of the summarizer, one
	// request and one credit, as tall as the scale's half (a scale to 2), on screen.
	charts, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('.chart svg[role="img"]')].map(s =>
		s.getAttribute("aria-label") + " | " + [...s.querySelectorAll("rect")].map(r => r.textContent + " h=" + r.getAttribute("height")).join(";") +
		" | " + Math.round(s.getBoundingClientRect().height))`))
	if err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC().Format("2006-01-02")
	if len(charts) != 2 || !strings.Contains(charts[0], "1 request in all") || !strings.Contains(charts[0], today+", summarizer: 1 request h=") ||
		!strings.Contains(charts[1], "1 credit in all") || !strings.Contains(charts[1], today+", summarizer: 1 credit h=") {
		t.Fatalf("charts: %q", charts)
	}
	for _, c := range charts {
		if strings.HasSuffix(c, " | 0") {
			t.Fatalf("a chart is not drawn: %q", c)
		}
	}
	// The CSV export, downloaded by clicking its link: the purchase and the charge of the
	// request.
	csvText := download(t, ctx, "#export-csv", "history-*.csv")
	if !strings.HasPrefix(csvText, "time,kind,mode,credits,") || !strings.Contains(csvText, ",purchase,live,10,") || !strings.Contains(csvText, cs.ID+",2.00,EUR,") ||
		!strings.Contains(csvText, ",settle,live,-1,") || !strings.Contains(csvText, res.header.Get("X-Request-Id")) {
		t.Fatalf("CSV export:\n%s", csvText)
	}
	// Usage by key: the key that generated, by its name, with its tool; and its CSV.
	if byKey := text("#usage-by-key"); !strings.Contains(byKey, "browser test") || !strings.Contains(byKey, "summarizer 1") {
		t.Fatalf("usage by key: %q", byKey)
	}
	keysCSV := download(t, ctx, "#export-keys-csv", "usage-by-key-*.csv")
	if !strings.HasPrefix(keysCSV, "key_id,key_name,key_last4,mode,tool,requests,credits,not_charged\n") ||
		!strings.Contains(keysCSV, ",browser test,"+apiKey[len(apiKey)-4:]+",live,summarizer,1,1,0\n") {
		t.Fatalf("usage by key CSV:\n%s", keysCSV)
	}
	shots.shot("dashboard")

	// The generation's signed receipt verifies with the published keys alone.
	keySet := fetchReceiptKeys(t)
	genReceipt := fetchJSON[receipts.Signed](t, caddyBase+"/api/v1/generations/"+res.header.Get("X-Request-Id")+"/receipt", apiKey)
	if err := receipts.Verify(keySet, genReceipt); err != nil {
		t.Fatalf("the generation's signed receipt: %v\n%s", err, genReceipt.Receipt)
	}

	// The purchase's receipt, from its link on the dashboard.
	do("receipt", chromedp.Click(chromedp.CSS(`a[href="/account/receipts/`+cs.ID+`"]`)), chromedp.WaitVisible(chromedp.CSS("#receipt-credits")))
	if credits, amount, ref := text("#receipt-credits"), text("#receipt-amount"), text("#receipt-reference"); credits != "10" || amount != "€2.00 (EUR)" || ref != cs.ID {
		t.Fatalf("receipt: %q %q %q", credits, amount, ref)
	}
	shots.shot("receipt")
	// Its signed form, downloaded from the page, verifies with the published keys alone; a
	// changed amount does not.
	var signedPurchase receipts.Signed
	if err := json.Unmarshal([]byte(download(t, ctx, "#signed-receipt-link", "receipt-*.json")), &signedPurchase); err != nil {
		t.Fatal(err)
	}
	var pr receipts.Purchase
	if err := json.Unmarshal(signedPurchase.Receipt, &pr); err != nil || pr.Type != "purchase" || pr.Reference != cs.ID ||
		pr.AccountID != acct.ID || pr.Credits != 10 || pr.AmountCents != 200 || pr.Currency != "EUR" {
		t.Fatalf("the signed purchase receipt: %s %v", signedPurchase.Receipt, err)
	}
	if err := receipts.Verify(keySet, signedPurchase); err != nil {
		t.Fatalf("the signed purchase receipt: %v", err)
	}
	pr.AmountCents = 20000
	forged, _ := receipts.Canonical(pr)
	if err := receipts.Verify(keySet, receipts.Signed{Receipt: forged, Signature: signedPurchase.Signature, KeyID: signedPurchase.KeyID}); err == nil {
		t.Fatal("a purchase receipt with another amount verifies")
	}

	// The key's limits, on its own form: a daily budget of 2, counted from when it is set (the
	// generation above is not in it); the keys page shows what is left, and the API refuses the
	// key past it.
	do("keys", chromedp.Navigate(caddyBase+"/account/keys"), chromedp.WaitVisible(chromedp.CSS(".limits-link")))
	// A key without a budget says so in words that do not read as none left.
	if left := text(".budget-left"); left != "no limit" {
		t.Fatalf("budget left of a key without a budget: %q", left)
	}
	do("key limits", chromedp.Click(chromedp.CSS(".limits-link")), chromedp.WaitVisible(chromedp.CSS("#budget-day")))
	shots.shot("key-settings")
	do("set a budget", chromedp.SendKeys(chromedp.CSS("#budget-day"), "2"),
		chromedp.Click(chromedp.CSS(`form[action="/account/keys/settings"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("p.notice")))
	if left := text(".budget-left"); !strings.Contains(left, "2 of 2 left today") {
		t.Fatalf("budget left after setting it: %q", left)
	}
	shots.shot("keys-budget")
	for range 2 {
		if res := generate(t, apiKey); res.status != http.StatusOK {
			t.Fatalf("generate within the key's budget: %d %s", res.status, res.body)
		}
	}
	if res := generate(t, apiKey); res.status != http.StatusPaymentRequired || !strings.Contains(res.body, "key_budget_exhausted") {
		t.Fatalf("generate past the key's budget: %d %s", res.status, res.body)
	}
	do("keys page again", chromedp.Navigate(caddyBase+"/account/keys"), chromedp.WaitVisible(chromedp.CSS(".budget-left")))
	if left := text(".budget-left"); !strings.Contains(left, "0 of 2 left today") {
		t.Fatalf("budget left once spent: %q", left)
	}
	// Remove the budget again (the test goes on spending below).
	do("remove the budget", chromedp.Click(chromedp.CSS(".limits-link")), chromedp.WaitVisible(chromedp.CSS("#budget-day")),
		chromedp.SetValue(chromedp.CSS("#budget-day"), ""),
		chromedp.Click(chromedp.CSS(`form[action="/account/keys/settings"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("p.notice")))
	// Roll the key with an hour's grace: the new secret is shown once, and both work.
	do("roll", chromedp.Click(chromedp.CSS(".limits-link")), chromedp.WaitVisible(chromedp.CSS("#roll-grace")),
		chromedp.SetValue(chromedp.CSS("#roll-grace"), "1h"),
		chromedp.Click(chromedp.CSS(`form[action="/account/keys/roll"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#new-key")))
	rolledKey, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS("#new-key")))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ledger.CheckKeyFormat(rolledKey); !ok || rolledKey == apiKey || !strings.Contains(text("#grace-note"), "works until") {
		t.Fatalf("the roll shows %q and %q", rolledKey, text("#grace-note"))
	}
	shots.shot("key-rolled")
	for _, k := range []string{apiKey, rolledKey} {
		if res := generate(t, k); res.status != http.StatusOK {
			t.Fatalf("generate after the roll, within the grace period: %d %s", res.status, res.body)
		}
	}

	// Phone size: the same pages must be usable on a 360 px screen, tables included.
	for _, p := range []struct{ path, wait, name string }{
		{"/account/", "#live-credits", "phone-dashboard"},
		{"/account/keys", "#key-name", "phone-keys"},
		{"/account/buy", ".package", "phone-buy"},
		{"/account/receipts/" + cs.ID, "#receipt-credits", "phone-receipt"},
		{"/account/buy/success?session_id=" + cs.ID, "#live-credits", "phone-buy-success"},
		{"/account/keys/revoke?id=" + keyIDOf(t, store, acct.ID), "button.danger", "phone-revoke-confirm"},
		{"/account/keys/settings?id=" + keyIDOf(t, store, acct.ID), "#budget-day", "phone-key-settings"},
		{"/account/nowhere", "h1", "phone-not-found"},
	} {
		do(p.name, phone, chromedp.Navigate(caddyBase+p.path), chromedp.WaitVisible(chromedp.CSS(p.wait)))
		checkPhoneFit(t, ctx, p.path)
		shots.shot(p.name)
	}
	do("desktop again", desktop)

	// Revoke the key, with the confirmation step; the API refuses it from then on.
	do("revoke link", chromedp.Navigate(caddyBase+"/account/keys"), chromedp.WaitVisible(chromedp.CSS(".danger-link")),
		chromedp.Click(chromedp.CSS(".danger-link")), chromedp.WaitVisible(chromedp.CSS("button.danger")))
	shots.shot("revoke-confirm")
	do("revoke", chromedp.Click(chromedp.CSS("button.danger")), chromedp.WaitVisible(chromedp.CSS("p.notice")))
	if n := text("p.notice"); !strings.Contains(n, "is revoked") {
		t.Fatalf("notice after revoking: %q", n)
	}
	shots.shot("keys-revoked")
	if res := generate(t, apiKey); res.status != http.StatusUnauthorized {
		t.Fatalf("generate with the revoked key: %d", res.status)
	}

	// Log out, and the dashboard is closed.
	do("log out", chromedp.Click(chromedp.CSS(`form[action="/account/logout"] button`)), chromedp.WaitVisible(chromedp.CSS("#password")))
	if n := text("p.notice"); !strings.Contains(n, "logged out") {
		t.Fatalf("after log-out: %q", n)
	}
	shots.shot("logged-out")
	do("dashboard after log-out", chromedp.Navigate(caddyBase+"/account/"), chromedp.WaitVisible(chromedp.CSS("#password")))
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	if !strings.HasSuffix(loc, "/account/login") {
		t.Fatalf("after log-out the dashboard leads to %q", loc)
	}
	// The logged-out pages on a phone.
	for _, p := range []struct{ path, wait, name string }{
		{"/account/login", "#password", "phone-login"},
		{"/account/signup", "#password", "phone-signup"},
	} {
		do(p.name, phone, chromedp.Navigate(caddyBase+p.path), chromedp.WaitVisible(chromedp.CSS(p.wait)))
		checkPhoneFit(t, ctx, p.path)
		shots.shot(p.name)
	}
	do("desktop for the log-in", desktop, chromedp.Navigate(caddyBase+"/account/login"), chromedp.WaitVisible(chromedp.CSS("#password")))
	// And back in with a wrong password: the error shows; then the right one.
	do("wrong password", chromedp.SendKeys(chromedp.CSS("#email"), email), chromedp.SendKeys(chromedp.CSS("#password"), "wrong password!"),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#form-error")))
	shots.shot("login-error")
	// This server sends no e-mail, so its log-in page offers no password reset.
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('a[href$="/forgot"]').length`)); n != 0 || !strings.Contains(text("#no-reset"), "ask its operator") {
		t.Fatalf("the log-in page of a server without e-mail links to a password reset")
	}
	do("log in", chromedp.SendKeys(chromedp.CSS("#password"), testPassword),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#live-credits")))

	if got := purchasesOf(t, store, acct.ID); len(got) != 1 || got[cs.ID] != 1 {
		t.Fatalf("purchases %v", got)
	}
	if rep, err := store.Verify(bg); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

type genResult struct {
	status int
	header http.Header
	body   string
}

func generate(t *testing.T, key string) genResult {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"tool": "summarizer", "input": "The account area sells credits.", "language": "en"})
	req, _ := http.NewRequest(http.MethodPost, caddyBase+"/api/v1/generate", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("reading the generated text: %v", err)
	}
	return genResult{res.StatusCode, res.Header, string(out)}
}

var _ = strconv.Itoa

// keyIDOf is the id of the account's first key.
func keyIDOf(t *testing.T, store ledger.Store, acctID string) string {
	t.Helper()
	keys, err := store.ListKeys(bg, acctID)
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of %s: %v %v", acctID, keys, err)
	}
	return keys[0].ID
}

// checkPhoneFit fails the test when the page shown on a 360 px screen scrolls sideways, or when
// a table cell, link, button or chart is off the screen (behind a table's own sideways scroll).
func checkPhoneFit(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	width, err := chromedp.Run(ctx, chromedp.Evaluate[int]("document.documentElement.scrollWidth"))
	if err != nil {
		t.Fatal(err)
	}
	if width > 360 {
		t.Errorf("%s: the page is %d px wide on a 360 px screen (scrolls sideways)", path, width)
	}
	off, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("td, tfoot th, main a, main button, main input, .chart svg")]
		.filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && (r.right > innerWidth + 0.5 || r.left < -0.5); })
		.map(e => (e.textContent || e.tagName).trim().slice(0, 40))`))
	if err != nil {
		t.Fatal(err)
	}
	if len(off) > 0 {
		t.Errorf("%s: off a 360 px screen: %q", path, off)
	}
}

// download clicks the link sel and returns the file the browser saved, named like pattern.
func download(t *testing.T, ctx context.Context, sel, pattern string) string {
	t.Helper()
	dir := t.TempDir()
	err := chromedp.Do(ctx, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
			Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir})
		return chromedp.Void{}, err
	}, chromedp.Click(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("downloading %s: %v", sel, err)
	}
	for range 400 { // the browser writes NAME.crdownload, then renames it
		if got, _ := filepath.Glob(filepath.Join(dir, pattern)); len(got) == 1 {
			b, err := os.ReadFile(got[0])
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		time.Sleep(25 * time.Millisecond)
	}
	entries, _ := os.ReadDir(dir)
	t.Fatalf("clicking %s downloaded no %s (the folder has %v)", sel, pattern, entries)
	return ""
}

// fetchReceiptKeys reads the published receipt keys, as a customer would: no key.
func fetchReceiptKeys(t *testing.T) receipts.KeySet {
	t.Helper()
	return fetchJSON[receipts.KeySet](t, caddyBase+"/.well-known/textgen-receipt-keys", "")
}

// fetchJSON GETs url (with an API key, if any) and decodes its 200 answer.
func fetchJSON[T any](t *testing.T, url, key string) T {
	t.Helper()
	var v T
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &v) != nil {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return v
}
