package account

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	gomail "github.com/wneessen/go-mail"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-textgen/textgen/caddymodule/internal/mailtest"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// The e-mail flows on the account area in process, against a real SMTP server (mailpit, which
// keeps what it receives and lets the test read it) and a real Badger ledger on disk.

// fastMail shortens the sender's timing until the test ends. Call it before any app starts.
func fastMail(t *testing.T) {
	oldPoll, oldBase, oldLow := mailPoll, mailRetryBase, lowBalanceEvery
	mailPoll, mailRetryBase, lowBalanceEvery = 100*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	t.Cleanup(func() { mailPoll, mailRetryBase, lowBalanceEvery = oldPoll, oldBase, oldLow })
}

// diskLedger opens a Badger ledger in dir.
func diskLedger(t *testing.T, dir string) ledger.Store {
	t.Helper()
	store, err := badgerledger.Open(dir, badgerledger.Options{SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

var testMailKey = func() []byte { k := make([]byte, 32); rand.Read(k); return k }()

// withMail sends the app's e-mail through mp, over plain SMTP on loopback.
func withMail(t *testing.T, mp *mailtest.Server) envOpt {
	return func(c *appConfig) {
		m, err := newMailer(SMTP{Host: mp.Host(), Port: mp.SMTPPort(), Security: "none",
			From: "Test API <no-reply@example.com>", Timeout: caddy.Duration(5 * time.Second)}, testMailKey, "")
		if err != nil {
			t.Fatal(err)
		}
		c.mail = m
	}
}

// newMailTest is a test's mailpit, Badger ledger on disk and account area with e-mail through
// that mailpit; all end with the test.
func newMailTest(t *testing.T) (*mailtest.Server, ledger.Store, *testEnv) {
	fastMail(t)
	mp := mailtest.New(t)
	store := diskLedger(t, t.TempDir())
	t.Cleanup(func() { store.Close() })
	return mp, store, newMailEnv(t, store, mp)
}

// newMailEnv is the account area with e-mail through mp on store; its sender stops when the
// test ends.
func newMailEnv(t *testing.T, store ledger.Store, mp *mailtest.Server) *testEnv {
	e := newTestEnvOn(t, store, withMail(t, mp))
	t.Cleanup(e.app.close)
	return e
}

var linkRe = regexp.MustCompile(`/account/(verify|reset|invite)\?token=[0-9A-Za-z]+`)

// mailLink waits for a message to addr with subject and returns the link in its text, after
// checking that its HTML body carries the same link.
func mailLink(t *testing.T, mp *mailtest.Server, addr, subject string) string {
	t.Helper()
	m := mp.WaitFor(t, addr, subject, 30*time.Second)
	link := linkRe.FindString(m.Text)
	if link == "" || !strings.Contains(m.HTML, link) {
		t.Fatalf("no link in the message %q:\n%s\n%s", m.Subject, m.Text, m.HTML)
	}
	if m.From.Address != "no-reply@example.com" {
		t.Fatalf("sent from %q", m.From.Address)
	}
	return link
}

// waitOutboxEmpty waits until the stores' outbox holds no message: everything queued so far
// was delivered and marked sent, so nothing can still go out, once or again. A count of
// mailpit's messages waits for this instead of a fixed pause "for a second delivery".
func waitOutboxEmpty(t *testing.T, stores ...ledger.Store) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var queued []ledger.MailMessage
		for _, s := range stores {
			ms, err := s.ListMail(bg, 0)
			if err != nil {
				t.Fatal(err)
			}
			queued = append(queued, ms...)
		}
		if len(queued) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d e-mails still queued after 30 s: %+v", len(queued), queued)
		}
	}
}

// countMail is how many messages to addr with subject mailpit holds.
func countMail(t *testing.T, mp *mailtest.Server, addr, subject string) int {
	t.Helper()
	ms, err := mp.To(context.Background(), addr, subject)
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}

func TestVerificationMail(t *testing.T) {
	mp, store, e := newMailTest(t)
	b := e.browser()
	email := uniqueEmail("verify")
	acct := b.signup(email)
	if !acct.Unverified {
		t.Fatal("a sign-up with e-mail on is verified at once")
	}
	dash := b.get("/account/")
	mustContain(t, "dashboard of an unverified account", dash.body, `id="unverified"`, "not buy credits or create live keys")
	// Not yet: buying and live keys; test keys work.
	expectStatus(t, "buy page unverified", b.get("/account/buy"), http.StatusForbidden)
	csrf := b.csrf("/account/keys")
	r := b.post("/account/keys", "csrf_token", csrf, "name", "live one", "mode", "live")
	expectStatus(t, "live key unverified", r, http.StatusForbidden)
	mustContain(t, "live key refusal", r.body, "confirmed email address")
	expectStatus(t, "test key unverified", b.post("/account/keys", "csrf_token", csrf, "name", "test one", "mode", "test"), http.StatusCreated)

	link := mailLink(t, mp, email, "Confirm your email address")
	// Following it from another browser (a phone's mail app) works; once.
	other := e.browser()
	r = other.get(link)
	expectStatus(t, "verification link", r, http.StatusOK)
	mustContain(t, "verified page", r.body, "is confirmed")
	expectStatus(t, "verification link again", other.get(link), http.StatusBadRequest)
	if got, _ := store.GetAccount(bg, acct.ID); got.Unverified {
		t.Fatal("still unverified")
	}
	mustNotContain(t, "dashboard of a verified account", b.get("/account/").body, `id="unverified"`)
	expectStatus(t, "live key verified", b.post("/account/keys", "csrf_token", csrf, "name", "live one", "mode", "live"), http.StatusCreated)
}

func TestResetPassword(t *testing.T) {
	mp, _, e := newMailTest(t)
	email := uniqueEmail("reset")
	e.browser().signup(email)
	laptop := e.browser() // a session that the reset must end
	expectStatus(t, "laptop log-in", laptop.login(email, testPassword), http.StatusSeeOther)
	expectStatus(t, "laptop dashboard", laptop.get("/account/"), http.StatusOK)

	// The same answer for a known and an unknown address; only the known one gets mail.
	forgot := func(b *browser, addr string) resp {
		return b.post("/account/forgot", "csrf_token", b.csrf("/account/forgot"), "email", addr)
	}
	phone := e.browser()
	known := forgot(phone, email)
	unknown := forgot(e.browser(), "nobody-"+email)
	expectStatus(t, "forgot, known", known, http.StatusOK)
	expectStatus(t, "forgot, unknown", unknown, http.StatusOK)
	if strings.ReplaceAll(unknown.body, "nobody-"+email, email) != known.body {
		t.Fatalf("the answers differ:\n%s\n----\n%s", known.body, unknown.body)
	}
	link := mailLink(t, mp, email, "Reset your password")
	e.app.background.Wait()
	// A second link, asked for from another device; using the first ends it.
	expectStatus(t, "forgot again", forgot(e.browser(), email), http.StatusOK)
	e.app.background.Wait()
	var second string
	for deadline := time.Now().Add(30 * time.Second); second == "" || second == link; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no second reset e-mail")
		}
		if ms, _ := mp.To(context.Background(), email, "Reset your password"); len(ms) == 2 {
			second = linkRe.FindString(ms[0].Text)
		}
	}
	if n := countMail(t, mp, "nobody-"+email, ""); n != 0 {
		t.Fatalf("%d messages to an address without account", n)
	}

	// The link moves its token into a cookie and leaves the address bar.
	r := phone.get(link)
	if r.status != http.StatusSeeOther || r.location() != "/account/reset" {
		t.Fatalf("link: %d %s", r.status, r.location())
	}
	form := phone.get("/account/reset")
	expectStatus(t, "reset form", form, http.StatusOK)
	mustContain(t, "reset form", form.body, email, `name="password"`)
	csrf := csrfRe.FindStringSubmatch(form.body)[1]
	weak := phone.post("/account/reset", "csrf_token", csrf, "password", "short")
	expectStatus(t, "weak new password", weak, http.StatusBadRequest)
	const newPassword = "a brand new passphrase"
	r = phone.post("/account/reset", "csrf_token", csrf, "password", newPassword)
	if r.status != http.StatusSeeOther || r.location() != "/account/" {
		t.Fatalf("setting the password: %d %s\n%s", r.status, r.location(), r.body)
	}
	expectStatus(t, "phone dashboard", phone.get("/account/"), http.StatusOK)
	if r := laptop.get("/account/"); r.status != http.StatusSeeOther || !strings.Contains(r.location(), "expired") {
		t.Fatalf("the other session lives on: %d %s", r.status, r.location())
	}
	expectStatus(t, "old password", e.browser().login(email, testPassword), http.StatusUnauthorized)
	expectStatus(t, "new password", e.browser().login(email, newPassword), http.StatusSeeOther)
	// Used up, and the second link with it.
	expectStatus(t, "link again", e.browser().get(link), http.StatusBadRequest)
	expectStatus(t, "the second link", e.browser().get(second), http.StatusBadRequest)
}

// A guessed token gets nothing, and guessing is throttled per client address.
func TestGuessedTokensThrottled(t *testing.T) {
	_, _, e := newMailTest(t)
	b := e.browser()
	guess := func(path string) resp {
		var tok [43]byte
		for i := range tok {
			tok[i] = "abcdefghijklmnopqrstuvwxyz"[i%26]
		}
		return b.get(path + "?token=" + string(tok[:]))
	}
	for i := range tokenFailLimitPerAddress.Burst {
		path := []string{"/account/verify", "/account/reset", "/account/invite"}[i%3]
		r := guess(path)
		expectStatus(t, "guess "+path, r, http.StatusBadRequest)
		mustContain(t, "guess", r.body, "This link is invalid, was used already or has expired")
	}
	r := guess("/account/reset")
	expectStatus(t, "guess past the limit", r, http.StatusTooManyRequests)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	// A guessed cookie (the token's place after a link's redirect) counts the same.
	c := e.browserFrom("127.0.0.3")
	u, _ := url.Parse(c.base + "/account/reset")
	c.jar.SetCookies(u, []*http.Cookie{{Name: "textgen_session_reset", Value: strings.Repeat("x", 43), Path: "/account/reset"}})
	for range tokenFailLimitPerAddress.Burst {
		expectStatus(t, "guessed cookie", c.get("/account/reset"), http.StatusBadRequest)
	}
	expectStatus(t, "guessed cookie past the limit", c.get("/account/reset"), http.StatusTooManyRequests)
	// Another address is not affected.
	expectStatus(t, "guess from elsewhere", e.browserFrom("127.0.0.2").get("/account/verify?token=x"), http.StatusBadRequest)
}

func TestChangePassword(t *testing.T) {
	mp, _, e := newMailTest(t)
	email := uniqueEmail("change")
	b := e.browser()
	b.signup(email)
	other := e.browser()
	expectStatus(t, "other log-in", other.login(email, testPassword), http.StatusSeeOther)
	// A reset link asked for before the change stops working with it.
	fb := e.browser()
	expectStatus(t, "forgot", fb.post("/account/forgot", "csrf_token", fb.csrf("/account/forgot"), "email", email), http.StatusOK)
	resetLink := mailLink(t, mp, email, "Reset your password")
	csrf := b.csrf("/account/settings")
	wrong := b.post("/account/password", "csrf_token", csrf, "current_password", "not my password", "new_password", "another good passphrase")
	expectStatus(t, "wrong current password", wrong, http.StatusUnauthorized)
	mustContain(t, "wrong current password", wrong.body, "current password is not correct")
	expectStatus(t, "other session after a wrong try", other.get("/account/"), http.StatusOK)
	r := b.post("/account/password", "csrf_token", csrf, "current_password", testPassword, "new_password", "another good passphrase")
	if r.status != http.StatusSeeOther || r.location() != "/account/settings?changed=1" {
		t.Fatalf("change: %d %s\n%s", r.status, r.location(), r.body)
	}
	mustContain(t, "settings after the change", b.get("/account/settings?changed=1").body, "Every other session of your account has ended")
	if r := other.get("/account/"); r.status != http.StatusSeeOther {
		t.Fatalf("the other session lives on: %d", r.status)
	}
	expectStatus(t, "old password", e.browser().login(email, testPassword), http.StatusUnauthorized)
	expectStatus(t, "new password", e.browser().login(email, "another good passphrase"), http.StatusSeeOther)
	expectStatus(t, "reset link sent before the change", e.browser().get(resetLink), http.StatusBadRequest)
}

func TestInviteOperatorAccount(t *testing.T) {
	mp, store, e := newMailTest(t)
	email := uniqueEmail("invite")
	acct, err := store.CreateAccount(bg, email)
	if err != nil {
		t.Fatal(err)
	}
	expectStatus(t, "log-in without password", e.browser().login(email, testPassword), http.StatusUnauthorized)
	printed, mailed, err := e.app.Invite(bg, acct.ID)
	if err != nil || !mailed {
		t.Fatalf("Invite: %v, mailed %v", err, mailed)
	}
	link := mailLink(t, mp, email, "Your account on")
	if !strings.HasSuffix(printed, link) {
		t.Fatalf("printed %q, mailed %q", printed, link)
	}
	b := e.browser()
	expectStatus(t, "invitation link", b.get(link), http.StatusSeeOther)
	csrf := b.csrf("/account/invite")
	r := b.post("/account/invite", "csrf_token", csrf, "password", testPassword)
	if r.status != http.StatusSeeOther || r.location() != "/account/" {
		t.Fatalf("setting the first password: %d %s\n%s", r.status, r.location(), r.body)
	}
	expectStatus(t, "log-in with the new password", e.browser().login(email, testPassword), http.StatusSeeOther)
	expectStatus(t, "invitation link again", e.browser().get(link), http.StatusBadRequest)
	if _, _, err := e.app.Invite(bg, "acct_nobodynobodynobo"); err == nil {
		t.Fatal("invited an unknown account")
	}
}

// SMTP down: sign-up still succeeds at once, the message waits in the ledger, sealed, through a
// restart (the ledger closed and opened again from disk), and goes out once when SMTP is back.
func TestSMTPDownMailWaitsAndGoesOutOnce(t *testing.T) {
	fastMail(t)
	mp := mailtest.New(t)
	if err := mp.Stop(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store := diskLedger(t, dir)
	e := newTestEnvOn(t, store, withMail(t, mp))
	email := uniqueEmail("down")
	e.browser().signup(email)
	// A few failed attempts: the outbox counts them.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ms, err := store.ListMail(bg, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 1 && ms[0].Attempts >= 2 && ms[0].LastError != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no second failed attempt after 30 s: %+v", ms)
		}
	}
	e.app.close()
	e.srv.Close()
	// What waits on disk is sealed: neither the address nor a token link is in it.
	var ms []ledger.MailMessage
	for deadline := time.Now().Add(10 * time.Second); len(ms) == 0; time.Sleep(50 * time.Millisecond) {
		var err error
		if ms, err = store.ClaimMail(bg, time.Millisecond, 10); err != nil || time.Now().After(deadline) {
			t.Fatalf("queued: %d messages, %v", len(ms), err)
		}
	}
	if len(ms) != 1 {
		t.Fatalf("queued: %d messages", len(ms))
	}
	// The last error is the refused connection, or the attempt that closing the sender cut short.
	if last := ms[0].LastError; ms[0].Attempts < 2 || !strings.Contains(last, "connect") && !strings.Contains(last, "refused") && !strings.Contains(last, "canceled") {
		t.Fatalf("the queued message was not tried: %+v", ms[0])
	}
	if bytes.Contains(ms[0].Sealed, []byte("token=")) || bytes.Contains(ms[0].Sealed, []byte(email)) {
		t.Fatal("the queued message is stored in clear")
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mp.Start(); err != nil {
		t.Fatal(err)
	}
	store = diskLedger(t, dir)
	defer store.Close()
	newMailEnv(t, store, mp)
	link := mailLink(t, mp, email, "Confirm your email address")
	if u, _ := url.Parse(link); u.Query().Get("token") == "" {
		t.Fatalf("link %q", link)
	}
	waitOutboxEmpty(t, store) // a second delivery, if there were one, is in mailpit by now
	if n := countMail(t, mp, email, ""); n != 1 {
		t.Fatalf("%d messages; want exactly 1", n)
	}
}

func TestLowBalanceMail(t *testing.T) {
	mp, store, e := newMailTest(t)
	email := uniqueEmail("low")
	b := e.browser()
	acct := b.signup(email)
	mustGrant(t, store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 5, Reference: "g1"})
	r := b.post("/account/alerts", "csrf_token", b.csrf("/account/settings"), "threshold", "3")
	if r.status != http.StatusSeeOther {
		t.Fatalf("saving the alert: %d\n%s", r.status, r.body)
	}
	mustContain(t, "settings", b.get("/account/settings?alert=1").body, `value="3"`, "low-balance alert is saved")
	expectStatus(t, "bad threshold", b.post("/account/alerts", "csrf_token", b.csrf("/account/settings"), "threshold", "-1"), http.StatusBadRequest)
	for i := range 3 { // 5 -> 2: below 3
		requestOn(t, store, acct.ID, "low-"+string(rune('a'+i)), "summarizer", ledger.Live, true)
	}
	m := mp.WaitFor(t, email, "running low", 30*time.Second)
	mustContain(t, "low-balance mail", m.Text, "2 live credits left", "/account/buy")
	requestOn(t, store, acct.ID, "low-d", "summarizer", ledger.Live, true) // 1: still the same crossing
	// Back above, then below again: a second message.
	mustGrant(t, store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 9, Reference: "g2"})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if a, _ := store.GetAccount(bg, acct.ID); !a.LowBalanceNotified {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the alert did not see the credits back above it")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The check that saw the credits back above ran after low-d: a message for low-d, if any
	// check queued one, is queued by now, and out once the outbox is empty.
	waitOutboxEmpty(t, store)
	if n := countMail(t, mp, email, "running low"); n != 1 {
		t.Fatalf("%d low-balance messages for one crossing", n)
	}
	for i := range 8 { // 10 -> 2
		requestOn(t, store, acct.ID, "low2-"+string(rune('a'+i)), "summarizer", ledger.Live, true)
	}
	deadline = time.Now().Add(30 * time.Second)
	for countMail(t, mp, email, "running low") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no second low-balance message after a second crossing")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The production path: STARTTLS (the server's certificate checked) and a login. A wrong
// password keeps the message queued; the password reaches no log line, also not in the error.
func TestSMTPStartTLSLogin(t *testing.T) {
	fastMail(t)
	const password = "smtp-secret-password"
	mp := mailtest.NewTLS(t, "textgen", password)
	store := diskLedger(t, t.TempDir())
	defer store.Close()
	core, logs := observer.New(zap.DebugLevel)
	withTLSMail := func(pw string) envOpt {
		return func(c *appConfig) {
			m, err := newMailer(SMTP{Host: mp.Host(), Port: mp.SMTPPort(), Security: "starttls", Username: "textgen", Password: pw,
				From: "no-reply@example.com", Timeout: caddy.Duration(5 * time.Second)}, testMailKey, "")
			if err != nil {
				t.Fatal(err)
			}
			m.tlsRoots = mp.CertPool()
			c.mail, c.logger = m, zap.New(core)
		}
	}
	e := newTestEnvOn(t, store, withTLSMail("not the password"))
	email := uniqueEmail("tls")
	e.browser().signup(email)
	for deadline := time.Now().Add(20 * time.Second); logs.FilterMessage("e-mail not sent; retrying later").Len() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no failed attempt with a wrong password")
		}
	}
	e.app.close()
	e.srv.Close()
	if n := countMail(t, mp, email, ""); n != 0 {
		t.Fatalf("%d messages with a wrong password", n)
	}
	e = newTestEnvOn(t, store, withTLSMail(password))
	t.Cleanup(e.app.close)
	mailLink(t, mp, email, "Confirm your email address")
	e.app.close()
	for _, entry := range logs.All() {
		line := entry.Message
		for k, v := range entry.ContextMap() {
			line += fmt.Sprintf(" %s=%v", k, v)
		}
		if strings.Contains(line, password) || strings.Contains(line, "not the password") {
			t.Fatalf("a log line holds the SMTP password: %s", line)
		}
	}
}

// security tls: TLS from the first byte (port 465), against a mailpit that speaks nothing
// else, with a login. The same message, queued once, is first tried with starttls, which starts
// in plain text and so never gets a greeting (its attempt times out and is recorded), then with
// tls but without the test's certificate trusted (the handshake fails on the certificate), and
// then with tls as it should be: it arrives, once.
func TestSMTPImplicitTLS(t *testing.T) {
	fastMail(t)
	const password = "smtp-secret-password"
	mp := mailtest.NewImplicitTLS(t, "textgen", password)
	store := diskLedger(t, t.TempDir())
	defer store.Close()
	withSecurity := func(security string, timeout time.Duration, trust bool) envOpt {
		return func(c *appConfig) {
			m, err := newMailer(SMTP{Host: mp.Host(), Port: mp.SMTPPort(), Security: security, Username: "textgen", Password: password,
				From: "no-reply@example.com", Timeout: caddy.Duration(timeout)}, testMailKey, "")
			if err != nil {
				t.Fatal(err)
			}
			if trust {
				m.tlsRoots = mp.CertPool()
			}
			c.mail = m
		}
	}
	// failed waits until the queued message has failed an attempt whose error ok accepts, and
	// returns it.
	failed := func(what string, ok func(lastError string) bool) ledger.MailMessage {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ms, err := store.ListMail(bg, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) == 1 && ms[0].Attempts > 0 && ok(ms[0].LastError) {
				return ms[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no failed attempt; the outbox holds %+v", what, ms)
			}
		}
	}

	e := newTestEnvOn(t, store, withSecurity("starttls", time.Second, true))
	email := uniqueEmail("implicit-tls")
	e.browser().signup(email)
	plain := failed("starttls", func(le string) bool { return strings.Contains(le, "timeout") })
	e.app.close()
	e.srv.Close()
	if n := countMail(t, mp, email, ""); n != 0 {
		t.Fatalf("%d messages over starttls to a server that wants TLS from the first byte", n)
	}

	e = newTestEnvOn(t, store, withSecurity("tls", 5*time.Second, false))
	cert := failed("tls without the test's certificate", func(le string) bool { return strings.Contains(le, "certificate") })
	e.app.close()
	e.srv.Close()
	if cert.Attempts <= plain.Attempts {
		t.Fatalf("attempts %d after starttls, %d after tls without the certificate", plain.Attempts, cert.Attempts)
	}

	e = newTestEnvOn(t, store, withSecurity("tls", 5*time.Second, true))
	t.Cleanup(e.app.close)
	m := mp.WaitFor(t, email, "Confirm your email address", 30*time.Second)
	if len(m.To) != 1 || m.To[0].Address != email || m.From.Address != "no-reply@example.com" {
		t.Fatalf("delivered from %+v to %+v", m.From, m.To)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ms, err := store.ListMail(bg, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivered, but the outbox still holds %+v", ms)
		}
	}
	if n := countMail(t, mp, email, ""); n != 1 {
		t.Fatalf("%d messages; want 1", n)
	}
}

// handSender is an account area on a Badger ledger on disk with e-mail to a real mailpit, whose
// sender is stopped so that the test claims and delivers by hand (with client), and whose log is
// observed.
func handSender(t *testing.T) (*mailtest.Server, ledger.Store, *testEnv, *observer.ObservedLogs, *gomail.Client) {
	t.Helper()
	fastMail(t)
	mp := mailtest.New(t)
	store := diskLedger(t, t.TempDir())
	t.Cleanup(func() { store.Close() })
	core, logs := observer.New(zap.InfoLevel)
	e := newTestEnvOn(t, store, withMail(t, mp), func(c *appConfig) { c.logger = zap.New(core) })
	e.app.close() // no sender of its own
	client, err := e.app.smtpClient()
	if err != nil {
		t.Fatal(err)
	}
	return mp, store, e, logs, client
}

// The operator drops a message while a sender is delivering it (caddy textgen mail drop). The
// sender's MarkMailSent or RetryMail is then ErrNotFound: it logs that as information, not as
// a warning, and the message is not queued again. The sender is stopped and its deliver called
// by hand so that the test, not the sender, decides when the drop happens.
func TestDroppedWhileSending(t *testing.T) {
	mp, store, e, logs, client := handSender(t)
	// inFlight queues an invitation and claims it, as the sender does, and then drops it.
	inFlight := func(email string) ledger.MailMessage {
		t.Helper()
		acct, err := store.CreateAccount(bg, email)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.app.Invite(bg, acct.ID); err != nil {
			t.Fatal(err)
		}
		ms, err := store.ClaimMail(bg, time.Minute, 10)
		if err != nil || len(ms) != 1 {
			t.Fatalf("claimed %d messages, %v; want the invitation", len(ms), err)
		}
		if err := store.DropMail(bg, ms[0].ID); err != nil {
			t.Fatal(err)
		}
		return ms[0]
	}
	notQueued := func(what string) {
		t.Helper()
		if ms, err := store.ListMail(bg, 0); err != nil || len(ms) != 0 {
			t.Fatalf("%s: the outbox holds %+v, %v; want nothing", what, ms, err)
		}
	}

	// Delivered, then found dropped.
	sent := uniqueEmail("dropped-sent")
	e.app.deliver(bg, client, inFlight(sent))
	mp.WaitFor(t, sent, "Your account on", 10*time.Second)
	notQueued("after delivering a dropped message")
	if n := logs.FilterMessageSnippet("e-mail sent; it had left the outbox meanwhile").FilterLevelExact(zap.InfoLevel).Len(); n != 1 {
		t.Errorf("%d information lines for a dropped message delivered; want 1: %v", n, logs.All())
	}

	// Failed (SMTP down), then found dropped: not retried.
	if err := mp.Stop(); err != nil {
		t.Fatal(err)
	}
	e.app.deliver(bg, client, inFlight(uniqueEmail("dropped-failed")))
	notQueued("after failing to deliver a dropped message")
	if n := logs.FilterMessageSnippet("e-mail not sent, and not retried by this sender").FilterLevelExact(zap.InfoLevel).Len(); n != 1 {
		t.Errorf("%d information lines for a dropped message that failed; want 1: %v", n, logs.All())
	}
	if warn := logs.FilterLevelExact(zap.WarnLevel).All(); len(warn) != 0 {
		t.Errorf("a dropped message is logged as a warning: %v", warn)
	}
}

// TestMailGivenUpOnceExpired: a message not delivered while its link works is dropped instead
// of sent (a reset link an hour old only tells the customer it expired), with a warning for the
// operator; a message still worth sending at that moment is delivered.
func TestMailGivenUpOnceExpired(t *testing.T) {
	mp, store, e, logs, client := handSender(t)
	resetTo, inviteTo := uniqueEmail("expired-reset"), uniqueEmail("live-invite")
	for _, q := range []struct {
		email, kind string
		purpose     ledger.TokenPurpose
		ttl         time.Duration
	}{{resetTo, "reset", ledger.TokenReset, resetTTL}, {inviteTo, "invite", ledger.TokenInvite, inviteTTL}} {
		acct, err := store.CreateAccount(bg, q.email)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.app.sendTokenMail(bg, acct, q.purpose, q.ttl, q.kind, "/"+q.kind); err != nil {
			t.Fatal(err)
		}
	}
	// The SMTP server was down for two hours: the reset link (an hour) has expired, the
	// invitation (a week) has not.
	later := time.Now().Add(2 * time.Hour)
	var at atomic.Pointer[time.Time]
	at.Store(&later)
	setClock(t, &at)
	ms, err := store.ClaimMail(bg, time.Minute, 10)
	if err != nil || len(ms) != 2 {
		t.Fatalf("claimed %d messages, %v; want the reset and the invitation", len(ms), err)
	}
	for _, m := range ms {
		e.app.deliver(bg, client, m)
	}
	mp.WaitFor(t, inviteTo, "Your account on", 10*time.Second)
	if left, err := store.ListMail(bg, 0); err != nil || len(left) != 0 {
		t.Fatalf("the outbox holds %+v, %v; want nothing (one delivered, one given up)", left, err)
	}
	// Both were delivered in order, so the invitation's arrival means the reset had its turn.
	if got, err := mp.To(bg, resetTo, ""); err != nil || len(got) != 0 {
		t.Fatalf("%d messages to %s, %v: an expired reset link was sent", len(got), resetTo, err)
	}
	given := logs.FilterMessageSnippet("an e-mail was given up").FilterLevelExact(zap.WarnLevel).All()
	if len(given) != 1 || given[0].ContextMap()["kind"] != "reset" {
		t.Fatalf("given-up warnings %v; want one, of the reset", given)
	}
}
