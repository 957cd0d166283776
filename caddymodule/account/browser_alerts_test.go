package account

import (
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	_ "github.com/caddy-textgen/textgen/caddymodule/operator" // the admin API's alert routes
	"github.com/caddy-textgen/textgen/ledger"
)

// TestBrowserAlerts: in a real Caddy, an account holder adds an HTTPS endpoint on the Alerts
// page, sees its secret once, and then sees the delivery of a low-balance alert that a real
// receiver (checking the signature with that secret) got; the admin API lists it too and adds
// a second endpoint whose secret it returns.
func TestBrowserAlerts(t *testing.T) {
	oldEvery := lowBalanceEvery
	lowBalanceEvery = 100 * time.Millisecond // read when the area's sender starts
	t.Cleanup(func() { lowBalanceEvery = oldEvery })
	rc := newReceiver(t, 0)
	alertTestRoots = rc.roots()
	t.Cleanup(func() { alertTestRoots = nil })
	ctx := newChromium(t)
	dir, err := os.MkdirTemp(testRoot, "ledger-")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEXTGEN_TEST_MAIL_KEY", base64.StdEncoding.EncodeToString(testMailKey))
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
		site_name "Textgen"
		mail_key {env.TEXTGEN_TEST_MAIL_KEY}
		alerts {
			allow_private_endpoints
		}
	}
	respond "not found" 404
}
`, caddyAdminPort, caddyHTTPPort, caddyHTTPSPort, caddyHTTPPort, dir))
	store, release := openLedger(t, dir)
	defer release()
	shots := &shooter{t: t, ctx: ctx, dir: artifactsDir(t, "browser-alerts")}
	do, text := shots.do, shots.text
	do("desktop", chromedp.EmulateViewport(1280, 900))

	acct, err := store.CreateAccountWithPassword(bg, uniqueEmail("browser-alerts"), testPassword)
	if err != nil {
		t.Fatal(err)
	}
	do("log in", chromedp.Navigate(caddyBase+"/account/login"), chromedp.WaitVisible(chromedp.CSS("#email")),
		chromedp.SendKeys(chromedp.CSS("#email"), acct.Email), chromedp.SendKeys(chromedp.CSS("#password"), testPassword),
		chromedp.Click(chromedp.CSS(`main button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#live-credits")))
	do("alerts page", chromedp.Click(chromedp.CSS(`nav a[href="/account/webhooks"]`)), chromedp.WaitVisible(chromedp.CSS("#url")))
	shots.shot("alerts-empty")
	do("add an endpoint", chromedp.SendKeys(chromedp.CSS("#url"), rc.srv.URL+"/textgen-events"),
		chromedp.Click(chromedp.CSS(`#kind-balance\.low`)), chromedp.Click(chromedp.CSS(`form[action="/account/webhooks"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#secret")))
	secret := text("#secret")
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret shown: %q", secret)
	}
	rc.mu.Lock()
	rc.secret = secret
	rc.mu.Unlock()
	shots.shot("alerts-secret")

	// Credits below the alert: the area's check raises balance.low, its sender delivers it.
	if _, err := store.SetLowBalanceAlert(bg, acct.ID, 5); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, _, _, evs := rc.snapshot(); len(evs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			calls, bad, _, _ := rc.snapshot()
			t.Fatalf("no event reached the receiver (%d calls, %d bad signatures)", calls, bad)
		}
	}
	if _, bad, _, evs := rc.snapshot(); bad != 0 {
		t.Fatalf("%d bad signatures; events %+v", bad, evs)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		do("reload", chromedp.Navigate(caddyBase+"/account/webhooks"), chromedp.WaitVisible(chromedp.CSS("#url")))
		if ok, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.querySelector("#deliveries .delivery-status")`)); ok &&
			text("#deliveries .delivery-status") == "delivered" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Alerts page does not show the delivery as delivered")
		}
	}
	if strings.Contains(text("main"), secret) {
		t.Fatal("the secret is shown again")
	}
	shots.shot("alerts-delivered")

	// The admin API lists the endpoint and delivery, and adds one, saying its secret once.
	var made struct {
		ID     string   `json:"id"`
		URL    string   `json:"url"`
		Kinds  []string `json:"kinds"`
		Secret string   `json:"secret"`
	}
	adminPost(t, "/textgen/accounts/"+acct.ID+"/alerts", map[string]any{"url": rc.srv.URL + "/second", "kinds": []string{ledger.AlertPurchaseCompleted}}, &made)
	if made.ID == "" || !strings.HasPrefix(made.Secret, "whsec_") || len(made.Kinds) != 1 {
		t.Fatalf("admin API made %+v", made)
	}
	eps, err := store.ListAlertEndpoints(bg, acct.ID)
	if err != nil || len(eps) != 2 {
		t.Fatalf("endpoints %+v, %v", eps, err)
	}
}
