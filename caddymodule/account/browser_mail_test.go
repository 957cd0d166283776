package account

// The e-mail flows in a real headless Chromium against the real Caddy (in process), a real
// Badger ledger on disk and a real SMTP server (mailpit) whose inbox the test reads: sign up and
// follow the verification link, forget and reset the password (the old one fails, the new one
// works, the other session ends), change it, the invitation of an account the operator made
// (through the admin API), the low-balance e-mail; and the mail of a sign-up made while SMTP is
// down, which waits through a restart of the config and goes out once. Screenshots go to
// testdata/artifacts/browser-mail/, each page checked with axe-core.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/caddy-textgen/textgen/caddymodule/internal/mailtest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	_ "github.com/caddy-textgen/textgen/caddymodule/operator" // the admin API, for the invitation
	"github.com/caddy-textgen/textgen/ledger"
)

// httpBrowser is a second client of the in-process Caddy, with its own session.
func httpBrowser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, jar: jar, base: caddyBase, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// adminPost calls the in-process Caddy's admin API.
func adminPost(t *testing.T, path string, body any, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	res, err := http.Post(fmt.Sprintf("http://localhost:%d%s", caddyAdminPort, path), "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		var e bytes.Buffer
		e.ReadFrom(res.Body)
		t.Fatalf("admin %s: %d %s", path, res.StatusCode, e.String())
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

func TestBrowserMailFlows(t *testing.T) {
	fastMail(t)
	mp := mailtest.New(t)
	ctx := newChromium(t)
	dir, err := os.MkdirTemp(testRoot, "ledger-")
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	t.Setenv("TEXTGEN_TEST_MAIL_KEY", base64.StdEncoding.EncodeToString(append(key[:0], testMailKey...)))
	config := fmt.Sprintf(`{
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
		smtp {
			host %s
			port %d
			security none
			from "Textgen <no-reply@example.com>"
		}
		mail_key {env.TEXTGEN_TEST_MAIL_KEY}
	}
	respond "not found" 404
}
`, caddyAdminPort, caddyHTTPPort, caddyHTTPSPort, caddyHTTPPort, dir, caddyBase, mp.Host(), mp.SMTPPort())
	loadCaddyfile(t, config)
	store, release := openLedger(t, dir)
	defer release()
	artifacts := artifactsDir(t, "browser-mail")
	shots := &shooter{t: t, ctx: ctx, dir: artifacts}
	do, text := shots.do, shots.text
	path := func() string {
		t.Helper()
		p, err := chromedp.Run(ctx, chromedp.Evaluate[string]("location.pathname + location.search"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	submit := chromedp.Click(chromedp.CSS(`main button[type="submit"]`))
	do("desktop", chromedp.EmulateViewport(1280, 900))

	// Sign up: the page says what waits for the confirmation.
	email := uniqueEmail("browser-mail")
	do("sign up", chromedp.Navigate(caddyBase+"/account/signup"), chromedp.WaitVisible(chromedp.CSS("#email")),
		chromedp.SendKeys(chromedp.CSS("#email"), email), chromedp.SendKeys(chromedp.CSS("#password"), testPassword),
		submit, chromedp.WaitVisible(chromedp.CSS("#unverified")))
	if msg := text("#unverified"); !strings.Contains(msg, "not buy credits or create live keys") {
		t.Fatalf("unverified notice %q", msg)
	}
	shots.shot("dashboard-unverified")
	do("buy page unverified", chromedp.Navigate(caddyBase+"/account/buy"), chromedp.WaitVisible(chromedp.CSS("h1")))
	if h := text("h1"); h != "Confirm your email address first" {
		t.Fatalf("buy page of an unverified account: %q", h)
	}

	// The verification e-mail; its link confirms the address.
	link := mailLink(t, mp, email, "Confirm your email address")
	if !strings.HasPrefix(link, "/account/verify?token=") {
		t.Fatalf("link %q", link)
	}
	m := mp.WaitFor(t, email, "Confirm", time.Second)
	if !strings.Contains(m.Text, caddyBase+link) {
		t.Fatalf("the e-mail's link is not absolute on public_url:\n%s", m.Text)
	}
	do("verification link", chromedp.Navigate(caddyBase+link), chromedp.WaitVisible(chromedp.CSS("h1")))
	if h := text("h1"); h != "Email address confirmed" {
		t.Fatalf("verification page %q", h)
	}
	shots.shot("verified")
	do("dashboard verified", chromedp.Navigate(caddyBase+"/account/"), chromedp.WaitVisible(chromedp.CSS("#live-credits")))
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#unverified").length`)); n != 0 {
		t.Fatal("the notice stays after the confirmation")
	}

	// Another session (another device) that the reset must end.
	other := httpBrowser(t)
	expectStatus(t, "other log-in", other.login(email, testPassword), http.StatusSeeOther)

	// Forgot the password: log out, ask for a link from the log-in page.
	do("log out", chromedp.Click(chromedp.CSS(`form[action="/account/logout"] button`)), chromedp.WaitVisible(chromedp.CSS(`a[href="/account/forgot"]`)))
	do("forgot", chromedp.Click(chromedp.CSS(`a[href="/account/forgot"]`)), chromedp.WaitVisible(chromedp.CSS("#email")))
	shots.shot("forgot")
	do("ask for a link", chromedp.SendKeys(chromedp.CSS("#email"), email), submit, chromedp.WaitVisible(chromedp.CSS("#forgot-sent")))
	shots.shot("forgot-sent")
	link = mailLink(t, mp, email, "Reset your password")
	do("reset link", chromedp.Navigate(caddyBase+link), chromedp.WaitVisible(chromedp.CSS("#password")))
	if p := path(); p != "/account/reset" {
		t.Fatalf("the reset form is at %q: the token stays in the address bar", p)
	}
	shots.shot("reset-form")
	const newPassword = "a fresh browser passphrase"
	do("new password", chromedp.SendKeys(chromedp.CSS("#password"), newPassword), submit, chromedp.WaitVisible(chromedp.CSS("#live-credits")))
	if r := other.get("/account/"); r.status != http.StatusSeeOther || !strings.Contains(r.location(), "expired") {
		t.Fatalf("the other session lives on after the reset: %d %s", r.status, r.location())
	}
	expectStatus(t, "old password", httpBrowser(t).login(email, testPassword), http.StatusUnauthorized)
	expectStatus(t, "new password", other.login(email, newPassword), http.StatusSeeOther)
	do("reset link again", chromedp.Navigate(caddyBase+link), chromedp.WaitVisible(chromedp.CSS("h1")))
	if h := text("h1"); h != "This link does not work" {
		t.Fatalf("a used link: %q", h)
	}

	// Change the password on the settings page: the other session ends, this one stays.
	const changed = "the changed passphrase"
	do("settings", chromedp.Navigate(caddyBase+"/account/settings"), chromedp.WaitVisible(chromedp.CSS("#current-password")))
	shots.shot("settings")
	do("change password", chromedp.SendKeys(chromedp.CSS("#current-password"), newPassword), chromedp.SendKeys(chromedp.CSS("#new-password"), changed),
		chromedp.Click(chromedp.CSS(`form[action="/account/password"] button`)), chromedp.WaitVisible(chromedp.CSS(".notice")))
	if msg := text(".notice"); !strings.Contains(msg, "Every other session of your account has ended") {
		t.Fatalf("after the change: %q", msg)
	}
	shots.shot("password-changed")
	if r := other.get("/account/"); r.status != http.StatusSeeOther {
		t.Fatalf("the other session lives on after the change: %d", r.status)
	}
	expectStatus(t, "changed password", httpBrowser(t).login(email, changed), http.StatusSeeOther)

	// The low-balance alert: set at 3 with 5 credits; the e-mail comes once they fall below.
	acct, err := store.GetAccountByEmail(bg, email)
	if err != nil {
		t.Fatal(err)
	}
	mustGrant(t, store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 5, Reference: "browser-mail"})
	do("alert", chromedp.SetValue(chromedp.CSS("#threshold"), "3"), chromedp.Click(chromedp.CSS(`form[action="/account/alerts"] button`)))
	for deadline := time.Now().Add(10 * time.Second); path() != "/account/settings?alert=1"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("saving the alert led to %s", path())
		}
	}
	do("alert saved", chromedp.WaitVisible(chromedp.CSS(".notice")))
	if msg := text(".notice"); !strings.Contains(msg, "low-balance alert is saved") {
		t.Fatalf("after saving the alert: %q", msg)
	}
	for i := range 3 {
		requestOn(t, store, acct.ID, fmt.Sprintf("browser-low-%d", i), "summarizer", ledger.Live, true)
	}
	low := mp.WaitFor(t, email, "running low", 30*time.Second)
	if !strings.Contains(low.Text, "2 live credits left") || !strings.Contains(low.Text, caddyBase+"/account/buy") {
		t.Fatalf("low-balance e-mail:\n%s", low.Text)
	}

	// An account the operator made gets its password through an invitation.
	invited := uniqueEmail("browser-invited")
	var made ledger.Account
	adminPost(t, "/textgen/accounts", map[string]any{"email": invited}, &made)
	var inv struct {
		Link   string `json:"link"`
		Mailed bool   `json:"mailed"`
	}
	adminPost(t, "/textgen/accounts/"+made.ID+"/invite", map[string]any{}, &inv)
	link = mailLink(t, mp, invited, "Your account on")
	if !inv.Mailed || inv.Link != caddyBase+link {
		t.Fatalf("the admin API printed %+v; the e-mail has %s", inv, link)
	}
	do("log out", chromedp.Navigate(caddyBase+"/account/settings"), chromedp.WaitVisible(chromedp.CSS(`form[action="/account/logout"] button`)),
		chromedp.Click(chromedp.CSS(`form[action="/account/logout"] button`)), chromedp.WaitVisible(chromedp.CSS("#email")))
	do("invitation", chromedp.Navigate(caddyBase+link), chromedp.WaitVisible(chromedp.CSS("#password")))
	if h := text("h1"); h != "Choose your password" {
		t.Fatalf("invitation page %q", h)
	}
	shots.shot("invitation")
	do("first password", chromedp.SendKeys(chromedp.CSS("#password"), testPassword), submit, chromedp.WaitVisible(chromedp.CSS("#live-credits")))
	expectStatus(t, "invited log-in", httpBrowser(t).login(invited, testPassword), http.StatusSeeOther)

	// The new pages on a 360 px phone screen.
	do("phone", chromedp.EmulateViewport(360, 800, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	for _, p := range []struct{ path, wait, name string }{
		{"/account/settings", "#current-password", "phone-settings"},
		{"/account/settings", `form[action="/account/logout"] button`, ""}, // then log out
		{"/account/forgot", "#email", "phone-forgot"},
	} {
		do(p.path, chromedp.Navigate(caddyBase+p.path), chromedp.WaitVisible(chromedp.CSS(p.wait)))
		if p.name == "" {
			do("log out", chromedp.Click(chromedp.CSS(p.wait)), chromedp.WaitVisible(chromedp.CSS("#email")))
			continue
		}
		do("phone", chromedp.EmulateViewport(360, 800, chromedp.EmulateScale(2), chromedp.EmulateMobile))
		checkPhoneFit(t, ctx, p.path)
		shots.shot(p.name)
	}
	do("desktop", chromedp.EmulateViewport(1280, 900))

	// SMTP down: a sign-up still succeeds; its e-mail waits in the ledger through a restart
	// (another config without the account area, then this one again) and goes out once.
	if err := mp.Stop(); err != nil {
		t.Fatal(err)
	}
	late := uniqueEmail("browser-late")
	lb := httpBrowser(t)
	r := lb.post("/account/signup", "csrf_token", lb.csrf("/account/signup"), "email", late, "password", testPassword)
	if r.status != http.StatusSeeOther {
		t.Fatalf("sign-up with SMTP down: %d\n%s", r.status, r.body)
	}
	release()
	loadCaddyfile(t, fmt.Sprintf("{\n\tadmin localhost:%d\n\thttp_port %d\n\thttps_port %d\n\tskip_install_trust\n}\nhttp://127.0.0.1:%d {\n\trespond \"restarting\" 503\n}\n",
		caddyAdminPort, caddyHTTPPort, caddyHTTPSPort, caddyHTTPPort))
	if n := len(textgenapp.OpenLedgers()); n != 0 {
		t.Fatalf("%d ledgers still open after the config without them", n)
	}
	if err := mp.Start(); err != nil {
		t.Fatal(err)
	}
	loadCaddyfile(t, config)
	mailLink(t, mp, late, "Confirm your email address")
	store, release = openLedger(t, dir) // the share of the config loaded again
	defer release()
	waitOutboxEmpty(t, store) // a second delivery, if there were one, is in mailpit by now
	if n := countMail(t, mp, late, ""); n != 1 {
		t.Fatalf("%d messages to the sign-up made while SMTP was down; want 1", n)
	}
}
