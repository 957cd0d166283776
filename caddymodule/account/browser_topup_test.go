package account

// Automatic top-up in a real headless Chromium against the real Caddy (in process, top_up on,
// Stripe at stripe-mock) and a real Badger ledger on disk: an owner with a saved card fills in the
// rule and saves it; the page shows the card, the rule, this month's top-ups, and, once a top-up
// was declined, that it is paused and why. Every page is checked with axe-core and fits every
// width; screenshots go to testdata/artifacts/browser-topup/.

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/caddy-textgen/textgen/ledger"
)

func TestBrowserTopUp(t *testing.T) {
	sm := realStripeMock(t)
	ctx := newChromium(t)
	dir, err := os.MkdirTemp(testRoot, "ledger-")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEXTGEN_TEST_STRIPE_KEY", "sk_test_123")
	t.Setenv("TEXTGEN_TEST_WEBHOOK_SECRET", testWebhookSecret)
	loadCaddyfile(t, fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 5s
	skip_install_trust
}
http://127.0.0.1:%d {
	textgen_account {
		ledger %s
		public_url %s
		site_name "Textgen"
		stripe_secret_key {env.TEXTGEN_TEST_STRIPE_KEY}
		stripe_webhook_secret {env.TEXTGEN_TEST_WEBHOOK_SECRET}
		stripe_api_url %s
		package small 10 200
		package large 50 900
		top_up on
	}
	respond "not found" 404
}
`, caddyAdminPort, caddyHTTPPort, caddyHTTPSPort, caddyHTTPPort, dir, caddyBase, sm.URL))
	store, release := openLedger(t, dir)
	defer release()
	email := uniqueEmail("topup")
	acct, err := store.CreateAccountWithPassword(bg, email, testPassword)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.SetEmailVerified(bg, acct.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := store.SaveTopUpCard(bg, acct.ID, ledger.TopUpCard{CustomerID: "cus_1", PaymentMethodID: "pm_1", Brand: "visa", Last4: "4242"}); err != nil {
		t.Fatal(err)
	}
	shots := &shooter{t: t, ctx: ctx, dir: artifactsDir(t, "browser-topup")}
	do, text := shots.do, shots.text
	do("desktop", chromedp.EmulateViewport(1280, 900))
	do("log in", chromedp.Navigate(caddyBase+"/account/login"), chromedp.WaitVisible(chromedp.CSS("#email")),
		chromedp.SendKeys(chromedp.CSS("#email"), email), chromedp.SendKeys(chromedp.CSS("#password"), testPassword),
		chromedp.Click(chromedp.CSS(`main button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#live-credits")))
	do("buy page", chromedp.Navigate(caddyBase+"/account/buy"), chromedp.WaitVisible(chromedp.CSS("#topup-link a")),
		chromedp.Click(chromedp.CSS("#topup-link a")), chromedp.WaitVisible(chromedp.CSS("#topup-threshold")))
	if got := text("#topup-card"); got != "visa ending in 4242" {
		t.Fatalf("card shown as %q", got)
	}
	shots.shot("topup-empty")
	do("fill in the rule", chromedp.SendKeys(chromedp.CSS("#topup-threshold"), "25"),
		chromedp.SetValue(chromedp.CSS("#topup-package"), "large"), chromedp.SendKeys(chromedp.CSS("#topup-cap"), "3"),
		chromedp.Click(chromedp.CSS("#topup-enabled")), chromedp.Click(chromedp.CSS("#save-rule")),
		chromedp.WaitVisible(chromedp.CSS(`[role="status"]`)))
	rule, err := store.TopUpRule(bg, acct.ID)
	if err != nil || !rule.Active() || rule.Threshold != 25 || rule.Package != "large" || rule.MonthlyCap != 3 {
		t.Fatalf("rule saved from the page: %+v, %v", rule, err)
	}
	// A top-up that the bank declined: the page says it is paused and why.
	tu, err := store.BeginTopUp(bg, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.FinishTopUp(bg, tu.ID, ledger.TopUpFailed, "Your card was declined: Your card has insufficient funds."); err != nil {
		t.Fatal(err)
	}
	do("paused", chromedp.Navigate(caddyBase+"/account/topup"), chromedp.WaitVisible(chromedp.CSS("#topup-paused")))
	if got := text("#topup-paused"); !strings.Contains(got, "paused") || !strings.Contains(got, "insufficient funds") {
		t.Fatalf("paused notice %q", got)
	}
	if got := text("#topups tbody"); !strings.Contains(got, "failed") || !strings.Contains(got, "large") {
		t.Fatalf("this month's top-ups %q", got)
	}
	shots.shot("topup-paused")
}
