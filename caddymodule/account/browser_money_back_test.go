package account

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserMoneyBack: the pages that show money flowing back, in a real headless Chromium,
// checked with axe-core and at a phone's width: the dashboard with a pending payment, a refund
// and a dispute, the receipt of a partly refunded purchase, and Stripe's return page of a
// pending payment. The account area runs in process on a Badger ledger on disk; the events are
// Stripe's, signed.
func TestBrowserMoneyBack(t *testing.T) {
	store := diskLedger(t, t.TempDir())
	t.Cleanup(func() { store.Close() })
	e := newTestEnvOn(t, store, withStripe("http://127.0.0.1:1", testWebhookSecret))
	email := "browser-money-back@example.com"
	acct := e.browser().signup(email)
	buyThrough(t, e, acct.ID, "cs_test_bmb_1")
	buyThrough(t, e, acct.ID, "cs_test_bmb_2")
	hook(t, e, refundEvent("refund.created", "re_test_bmb", paymentIntentOf("cs_test_bmb_1"), 50, "succeeded"), 200, "refund applied")
	hook(t, e, disputeEvent("charge.dispute.created", "du_test_bmb", paymentIntentOf("cs_test_bmb_2"), 200, "needs_response"), 200, "dispute open")
	hook(t, e, checkoutEvent("checkout.session.completed", "cs_test_bmb_sepa", acct.ID, "unpaid", "10", 200), 200, "payment pending")

	ctx := newChromium(t)
	desktop := chromedp.EmulateViewport(1280, 900)
	phone := chromedp.EmulateViewport(360, 800, chromedp.EmulateScale(2), chromedp.EmulateMobile)
	shots := &shooter{t: t, ctx: ctx, dir: artifactsDir(t, "browser-money-back")}
	shots.do("log in", desktop, chromedp.Navigate(e.srv.URL+"/account/login"), chromedp.WaitVisible(chromedp.CSS("#email")),
		chromedp.SendKeys(chromedp.CSS("#email"), email), chromedp.SendKeys(chromedp.CSS("#password"), testPassword),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#reversals")))
	if got := shots.text("#unpaid-payments tbody td[data-label=Status] .status"); got != "payment pending" {
		t.Fatalf("pending payment's status %q", got)
	}
	shots.shot("dashboard-money-back")
	shots.do("receipt", chromedp.Navigate(e.srv.URL+"/account/receipts/cs_test_bmb_1"), chromedp.WaitVisible(chromedp.CSS("#receipt-refunded")))
	if got := shots.text("#receipt-refunded"); got != "€0.50 of €2.00 (partial refund)" {
		t.Fatalf("receipt says %q", got)
	}
	shots.shot("receipt-refunded")
	shots.do("return page", chromedp.Navigate(e.srv.URL+"/account/buy/success?session_id=cs_test_bmb_sepa"), chromedp.WaitVisible(chromedp.CSS("#payment-pending")))
	shots.shot("buy-success-pending")
	for _, path := range []string{"/account/", "/account/receipts/cs_test_bmb_1"} {
		shots.do("phone "+path, phone, chromedp.Navigate(e.srv.URL+path), chromedp.WaitVisible(chromedp.CSS("main")))
		checkPhoneFit(t, ctx, path)
	}
}
