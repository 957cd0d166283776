package console

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/caddy-textgen/textgen/caddymodule/account/stripemocktest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/browsertest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/caddymodule/internal/opauth"
	"github.com/caddy-textgen/textgen/internal/tier"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/pgledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// The console in a real headless Chromium (chromedp) against the built caddy binary, with a
// real ledger (Badger on disk, or PostgreSQL), stripe-mock behind My Account for the refund, and
// the operators made with `caddy textgen operator create`. The owner logs in with the TOTP code
// of the secret the CLI printed (a wrong code and the same code twice are refused), finds an
// account, refunds its purchase (through Stripe's API; Stripe's own event for the refund then
// takes nothing more), and sees it in the audit log; a viewer's forged grant and a support
// operator's grant above its limit are refused by the server; an organisation's page shows its
// members; a key rolled and a member removed through the CLI are in the audit log. Every page is
// checked with axe-core and saved as a screenshot at 1280 and 390 pixels wide, in
// $TEXTGEN_SCREENSHOTS (else a temporary folder). The console is mounted at /ops only: /console
// on the same server is not the console.

func TestConsoleBrowser(t *testing.T) {
	tier.Full(t, "Chromium, stripe-mock and the caddy binary")
	sm, err := stripemocktest.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sm.Stop() })
	t.Run("badger", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "ledger")
		consoleBrowser(t, sm.URL, dir, dir)
	})
	t.Run("postgres", func(t *testing.T) {
		consoleBrowser(t, sm.URL, pgtest.NewDatabase(t), "")
	})
}

// shots takes the screenshots and runs axe-core on each page.
type shots struct {
	t   *testing.T
	ctx context.Context
	dir string
	n   int
}

func (s *shots) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	s.t.Helper()
	if err := chromedp.Do(s.ctx, steps...); err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

func (s *shots) text(sel string) string {
	s.t.Helper()
	v, err := chromedp.Run(s.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		s.t.Fatalf("reading %s: %v", sel, err)
	}
	return strings.TrimSpace(v)
}

// shot checks the page with axe-core, checks that it fits a phone's and a desktop's width
// (nothing scrolls sideways, every link and button in view), and saves it at both widths.
func (s *shots) shot(name string) {
	s.t.Helper()
	browsertest.CheckAccessibility(s.t, s.ctx, name)
	s.n++
	for _, w := range browsertest.Widths {
		s.do("viewport "+w.Name, w.Viewport)
		browsertest.CheckFits(s.t, s.ctx, name, w.Name)
		png, err := chromedp.Run(s.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			s.t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join(s.dir, fmt.Sprintf("%02d-%s-%s.png", s.n, name, w.Name))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
}

func consoleBrowser(t *testing.T, stripeURL, ledgerSpec, ledgerDir string) {
	const secret = "whsec_console"
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	s := caddyproc.Start(t, fmt.Sprintf(`handle /account/* {
		textgen_account {
			ledger %[1]s
			stripe_secret_key sk_test_console
			stripe_webhook_secret %[2]s
			stripe_api_url %[3]s
			site_name "Heron Text"
		}
	}
	handle /ops/* {
		textgen_console {
			ledger %[1]s
			path_prefix /ops
			console_key %[4]s
			support_grant_limit 100
		}
	}
	handle {
		respond "not the console" 404
	}`, ledgerSpec, secret, stripeURL, key), ledgerDir)
	base := "http://" + s.HTTP

	// The console is only where the Caddyfile mounts it.
	if res, err := http.Get(base + "/console/login"); err != nil || res.StatusCode != http.StatusNotFound || res.Header.Get("X-Frame-Options") != "" {
		t.Fatalf("/console/login on a server whose console is at /ops: %v %v", res, err)
	}

	enroll := func(email, role string) opauth.Enrollment {
		var en opauth.Enrollment
		raw, _ := json.Marshal(s.JSON("operator", "create", "--email", email, "--role", role, "--note", "browser test"))
		if err := json.Unmarshal(raw, &en); err != nil || en.TOTPSecret == "" || en.Password == "" || len(en.RecoveryCodes) != opauth.RecoveryCodes {
			t.Fatalf("operator create: %s (%v)", raw, err)
		}
		return en
	}
	owner := enroll("owner@example.com", "owner")
	viewer := enroll("viewer@example.com", "viewer")
	support := enroll("support@example.com", "support")
	if ops := caddyproc.List(t, s.JSON("operator", "list"), "operators"); len(ops) != 3 {
		t.Fatalf("operator list: %v", ops)
	}
	acct := caddyproc.Str(t, s.JSON("account", "create", "--email", "customer@example.com", "--test-credits", "0"), "id")
	// A key with budgets: the longest row of the account page's keys table.
	budgeted := caddyproc.Str(t, s.JSON("key", "create", "--account", acct, "--name", "build server"), "id")
	s.JSON("key", "limits", "--account", acct, "--key-id", budgeted, "--budget-day", "5", "--budget-month", "100", "--budget-total", "1000",
		"--tools", "summarizer,email-writer", "--cidrs", "203.0.113.0/24,2001:db8::/32")
	s.JSON("stripe", "webhook", "--url", base+"/account/stripe/webhook", "--secret", secret, "--account", acct, "--session", "cs_test_console")

	dir := os.Getenv("TEXTGEN_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	} else {
		dir = filepath.Join(dir, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(browsertest.Start(t), 4*time.Minute)
	defer cancel()
	sh := &shots{t: t, ctx: ctx, dir: dir}

	logIn := func(en opauth.Enrollment, code string) {
		sh.do("log-in form", chromedp.Navigate(base+"/ops/login"), chromedp.WaitVisible(chromedp.CSS("#email")),
			chromedp.SendKeys(chromedp.CSS("#email"), en.Operator.Email),
			chromedp.SendKeys(chromedp.CSS("#password"), en.Password),
			chromedp.SendKeys(chromedp.CSS("#code"), code),
			chromedp.Click(chromedp.CSS(`main button[type="submit"]`)),
			// The next page: the log-in form again with its error, or a page of the console.
			chromedp.WaitVisible(chromedp.CSS("p.error, header nav")))
	}
	totp := func(en opauth.Enrollment) string {
		c, err := opauth.Code(en.TOTPSecret, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	logOut := func() {
		sh.do("log-out", chromedp.Click(chromedp.CSS(`form.who button`)), chromedp.WaitVisible(chromedp.CSS("#email")))
	}

	sh.do("log-in page", chromedp.Navigate(base+"/ops/login"), chromedp.WaitVisible(chromedp.CSS("#email")))
	sh.shot("login")
	logIn(owner, "000000")
	if msg := sh.text("p.error"); !strings.Contains(msg, "Wrong e-mail, password or code") {
		t.Fatalf("a wrong code: %q", msg)
	}
	sh.shot("login-wrong-code")
	code := totp(owner)
	logIn(owner, code)
	if h := sh.text("main h1"); h != "Overview" {
		t.Fatalf("after log-in: %q", h)
	}
	// Without a site_name of its own, the console is named as My Account on the same ledger.
	if brand := sh.text(".brand"); !strings.Contains(brand, "Heron Text") {
		t.Fatalf("the console's header: %q, want My Account's site_name", brand)
	}
	// The accountant's export links, and the hint for any month, are under the console's
	// path (/ops here: revenue_test.go downloads them).
	exports, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#revenue-title ~ p a")].map(a => a.getAttribute("href"))`))
	if err != nil || len(exports) != 2 {
		t.Fatalf("the export links: %v %v", exports, err)
	}
	for _, x := range exports {
		if !strings.HasPrefix(x, "/ops/exports/payments-") || !strings.HasSuffix(x, ".csv") {
			t.Errorf("an export link: %s, want /ops/exports/payments-YYYY-MM.csv", x)
		}
	}
	if hint := sh.text("#revenue-title ~ p"); !strings.Contains(hint, "any month: /ops/exports/payments-YYYY-MM.csv") {
		t.Errorf("the export hint: %q", hint)
	}
	sh.shot("overview")
	logOut()
	logIn(owner, code) // the same code again
	if msg := sh.text("p.error"); !strings.Contains(msg, "used already") {
		t.Fatalf("a replayed code: %q", msg)
	}
	logIn(owner, owner.RecoveryCodes[0])
	if h := sh.text("main h1"); h != "Overview" {
		t.Fatalf("after log-in with a recovery code: %q", h)
	}

	// The accounts page lists them by e-mail address (these two made after the customer's).
	s.JSON("account", "create", "--email", "zoe@example.com", "--test-credits", "0")
	s.JSON("account", "create", "--email", "adam@example.com", "--test-credits", "0")
	sh.do("accounts", chromedp.Navigate(base+"/ops/accounts"), chromedp.WaitVisible(chromedp.CSS("#q")))
	emails, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('td[data-label="E-mail"]')].map(e => e.textContent.trim())`))
	if err != nil || strings.Join(emails, " ") != "adam@example.com customer@example.com zoe@example.com" {
		t.Fatalf("the accounts page lists %q (%v), want them by e-mail address", emails, err)
	}
	sh.shot("accounts")
	sh.do("search", chromedp.SendKeys(chromedp.CSS("#q"), "customer@example.com"),
		chromedp.Click(chromedp.CSS(`form.search button`)), chromedp.WaitVisible(chromedp.CSS("#grant-credits")))
	if h := sh.text("main h1"); h != "customer@example.com" {
		t.Fatalf("the account found: %q", h)
	}
	sh.shot("account-owner")
	sh.do("refund", chromedp.SendKeys(chromedp.CSS("#refund-note"), "customer asked, ticket 42"),
		chromedp.Click(chromedp.CSS(`form.refund button`)), chromedp.WaitVisible(chromedp.CSS("p.notice")))
	if msg := sh.text("p.notice"); !strings.Contains(msg, "refund") {
		t.Fatalf("after the refund: %q", msg)
	}
	sh.shot("account-refunded")
	balance := func() int64 { return caddyproc.Num(t, s.JSON("balance", "--account", acct), "balance") }
	if b := balance(); b != 0 {
		t.Fatalf("balance after refunding the whole purchase: %d", b)
	}
	rs := caddyproc.List(t, s.JSON("payments", "list"), "reversals")
	if len(rs) != 1 || rs[0]["kind"] != "refund" || rs[0]["reference"] != "cs_test_console" {
		t.Fatalf("refunds after the console's: %v", rs)
	}
	// Stripe's own event for the refund the console made: applied once already.
	reID, _ := rs[0]["id"].(string)
	payload, _ := json.Marshal(map[string]any{"id": "evt_console_refund", "object": "event", "type": "refund.created",
		"created": time.Now().Unix(), "api_version": "2025-01-27.acacia", "data": map[string]any{"object": map[string]any{
			"id": reID, "object": "refund", "amount": 200, "currency": "eur", "status": "succeeded",
			"payment_intent": "pi_local_test_console", "charge": "ch_local"}}})
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret})
	req, _ := http.NewRequest(http.MethodPost, base+"/account/stripe/webhook", strings.NewReader(string(payload)))
	req.Header.Set("Stripe-Signature", sp.Header)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var reply map[string]string
	json.NewDecoder(res.Body).Decode(&reply)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(reply["status"], "duplicate") {
		t.Fatalf("the refund's own event: %d %v", res.StatusCode, reply)
	}
	if b := balance(); b != 0 {
		t.Fatalf("balance after the refund's event: %d", b)
	}
	sh.do("audit", chromedp.Navigate(base+"/ops/audit"), chromedp.WaitVisible(chromedp.CSS("main h1")))
	if body := sh.text("main"); !strings.Contains(body, "refund of cs_test_console") || !strings.Contains(body, "customer asked, ticket 42") ||
		!strings.Contains(body, "operator.create") {
		t.Fatalf("the audit page: %s", body)
	}
	sh.shot("audit")
	sh.do("payments", chromedp.Navigate(base+"/ops/payments"), chromedp.WaitVisible(chromedp.CSS("main h1")))
	if body := sh.text("main"); !strings.Contains(body, reID) {
		t.Fatalf("the payments page: %s", body)
	}
	sh.shot("payments")
	if ledgerDir == "" {
		// A message in the outbox, queued through a second connection to the shared database.
		store, err := pgledger.OpenPostgres(context.Background(), ledgerSpec, pgledger.PostgresOptions{SweepInterval: -1, LastUsedFlushInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = store.EnqueueMail(context.Background(), ledger.MailMessage{AccountID: acct, Kind: "verify", Sealed: []byte("sealed")})
		store.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	sh.do("mail", chromedp.Navigate(base+"/ops/mail"), chromedp.WaitVisible(chromedp.CSS("main h1")))
	sh.shot("mail")
	if ledgerDir == "" {
		sh.do("drop", chromedp.SendKeys(chromedp.CSS("#drop-note-0"), "address bounces"),
			chromedp.Click(chromedp.CSS(`form[action$="/drop"] button`)), chromedp.WaitVisible(chromedp.CSS("p.notice")))
		if body := sh.text("main"); !strings.Contains(body, "The outbox is empty") {
			t.Fatalf("the mail page after the drop: %s", body)
		}
	}
	logOut()

	// The account made an organisation with a member (through the CLI): its page has the
	// Members card, which axe-core checks on the viewer's page below.
	member := caddyproc.Str(t, s.JSON("account", "create", "--email", "member@example.com", "--test-credits", "0"), "id")
	s.JSON("member", "organise", "--account", acct)
	s.JSON("member", "add", "--account", acct, "--member", member)

	// A viewer sees the account without forms; a grant form forged in its page is refused.
	logIn(viewer, totp(viewer))
	sh.do("viewer's account page", chromedp.Navigate(base+"/ops/accounts/"+acct), chromedp.WaitVisible(chromedp.CSS("main h1")))
	if body := sh.text("#members-title + p + div"); !strings.Contains(body, "member@example.com") || !strings.Contains(body, "customer@example.com") {
		t.Fatalf("the Members card: %s", body)
	}
	sh.shot("account-viewer")
	forge := fmt.Sprintf(`(() => { const f = document.createElement("form"); f.method = "post"; f.action = "/ops/accounts/%s/grant";
		for (const [k, v] of [["csrf_token", document.querySelector("form.who input[name=csrf_token]").value], ["credits", "50"], ["note", "forged"]]) {
			const i = document.createElement("input"); i.type = "hidden"; i.name = k; i.value = v; f.appendChild(i) }
		document.body.appendChild(f); f.submit(); return true })()`, acct)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](forge)); err != nil {
		t.Fatal(err)
	}
	sh.do("the forged grant's answer", chromedp.WaitVisible(chromedp.CSS("p.error")))
	if h, msg := sh.text("main h1"), sh.text("p.error"); h != "Not allowed" || !strings.Contains(msg, "viewer") {
		t.Fatalf("a viewer's forged grant: %q %q", h, msg)
	}
	sh.shot("viewer-forged-grant")
	if b := balance(); b != 0 {
		t.Fatalf("balance after the viewer's forged grant: %d", b)
	}
	logOut()

	// Support: above its limit refused, within it granted.
	logIn(support, totp(support))
	grant := func(n string) {
		sh.do("grant "+n, chromedp.Navigate(base+"/ops/accounts/"+acct), chromedp.WaitVisible(chromedp.CSS("#grant-credits")),
			chromedp.SendKeys(chromedp.CSS("#grant-credits"), n), chromedp.SendKeys(chromedp.CSS("#grant-note"), "goodwill"),
			chromedp.Click(chromedp.CSS(`form[action$="/grant"] button`)), chromedp.WaitVisible(chromedp.CSS("p.error, p.notice")))
	}
	grant("101")
	if h := sh.text("main h1"); h != "Above your limit" {
		t.Fatalf("support grants 101: %q", h)
	}
	sh.shot("support-above-limit")
	grant("100")
	if b := balance(); b != 100 {
		t.Fatalf("balance after support's grant of 100: %d", b)
	}
	sh.shot("account-support")
	logOut()

	// Removing an operator: it can no longer log in, and the audit log says who removed it.
	s.JSON("operator", "remove", "--id", viewer.Operator.ID, "--note", "left the team")
	if ops := caddyproc.List(t, s.JSON("operator", "list"), "operators"); len(ops) != 2 {
		t.Fatalf("operator list after a removal: %v", ops)
	}
	logIn(viewer, viewer.RecoveryCodes[0])
	if msg := sh.text("p.error"); !strings.Contains(msg, "Wrong e-mail, password or code") {
		t.Fatalf("a removed operator's log-in: %q", msg)
	}
	caddyproc.MustFail(t, s.Textgen("operator", "create", "--email", "x@example.com", "--role", "admin"), 1, "role")
	logIn(owner, owner.RecoveryCodes[1])
	// What the CLI does to an account is in the audit log too.
	s.JSON("credits", "adjust", "--account", acct, "--credits", "3", "--reason", "cli goodwill")
	kid := caddyproc.Str(t, s.JSON("key", "create", "--account", acct, "--name", "ci"), "id")
	s.JSON("key", "roll", "--account", acct, "--key-id", kid)
	s.JSON("member", "remove", "--account", acct, "--member", member)
	s.JSON("account", "disable", "--account", acct)
	sh.do("audit", chromedp.Navigate(base+"/ops/audit"), chromedp.WaitVisible(chromedp.CSS("main h1")))
	body := sh.text("main")
	for _, want := range []string{"operator.remove", "left the team", "+3 live credits", "cli goodwill", "disable", "(no reason given)", "caddy textgen (admin API)",
		"key.roll", "key " + kid, "member.remove", "member " + member} {
		if !strings.Contains(body, want) {
			t.Fatalf("the audit page after a removal and CLI actions lacks %q: %s", want, body)
		}
	}
	t.Logf("screenshots: %s", dir)
}
