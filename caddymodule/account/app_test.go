package account

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

func TestSignUpLogOutLogIn(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()

	// Anonymous pages.
	r := b.get("/account/")
	if r.status != http.StatusSeeOther || r.location() != "/account/login" {
		t.Fatalf("dashboard without a session: %d %q", r.status, r.location())
	}
	r = b.get("/account/signup")
	expectStatus(t, "sign-up page", r, http.StatusOK)
	mustContain(t, "sign-up page", r.body, `<label for="email">Email</label>`, `<label for="password">Password</label>`,
		`autocomplete="new-password"`, `name="csrf_token"`, `<html lang="en">`, `name="viewport"`)
	csrfCookie := b.cookie("textgen_session_csrf")
	if csrfCookie == nil {
		t.Fatal("the sign-up form set no CSRF cookie")
	}

	acct := b.signup("Alice@Example.com")
	if acct.Email != "alice@example.com" {
		t.Fatalf("account %+v", acct)
	}
	sess := b.cookie("textgen_session")
	if sess == nil || len(sess.Value) != 43 {
		t.Fatalf("session cookie %+v", sess)
	}
	// New accounts start with test credits.
	if bal, _ := e.store.Balance(bg, acct.ID); bal.TestAvailable != 50 || bal.Available != 0 {
		t.Fatalf("balance after sign-up %+v", bal)
	}
	r = b.get("/account/")
	expectStatus(t, "dashboard", r, http.StatusOK)
	mustContain(t, "dashboard", r.body, "alice@example.com", `id="live-credits" aria-labelledby="live-label">0<`,
		`id="test-credits" aria-labelledby="test-label">50<`, "No requests yet", "No purchases yet")

	// Log out: the session ends on the server, not only in the browser.
	token := sess.Value
	r = b.post("/account/logout", "csrf_token", b.csrf("/account/"))
	if r.status != http.StatusSeeOther || r.location() != "/account/login?logged_out=1" {
		t.Fatalf("log-out: %d %q", r.status, r.location())
	}
	if _, _, err := e.store.GetSession(bg, token); !errors.Is(err, ledger.ErrInvalidSession) {
		t.Fatalf("session after log-out: %v", err)
	}
	if r := b.get("/account/login?logged_out=1"); !strings.Contains(r.body, "You are logged out.") {
		t.Fatalf("log-out notice missing:\n%s", r.body)
	}

	// Log in again; the old token stays dead, the new one works.
	r = b.login("alice@example.com", testPassword)
	if r.status != http.StatusSeeOther || r.location() != "/account/" {
		t.Fatalf("log-in: %d %q\n%s", r.status, r.location(), r.body)
	}
	if c := b.cookie("textgen_session"); c == nil || c.Value == token {
		t.Fatalf("log-in did not start a new session: %+v", c)
	}
	expectStatus(t, "dashboard after log-in", b.get("/account/"), http.StatusOK)
	// A logged-in user who opens the log-in page goes to the dashboard.
	if r := b.get("/account/login"); r.status != http.StatusSeeOther || r.location() != "/account/" {
		t.Fatalf("log-in page while logged in: %d %q", r.status, r.location())
	}
}

func TestSessionCookieAttributes(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	r := b.post("/account/signup", "csrf_token", b.csrf("/account/signup"), "email", "cookie@example.com", "password", testPassword)
	var set string
	for _, c := range r.header.Values("Set-Cookie") {
		if strings.HasPrefix(c, "textgen_session=") {
			set = c
		}
	}
	for _, attr := range []string{"Path=/account", "HttpOnly", "SameSite=Lax", "Max-Age=43200"} {
		if !strings.Contains(set, attr) {
			t.Errorf("session cookie %q lacks %s", set, attr)
		}
	}
	if strings.Contains(set, "Secure") {
		t.Errorf("session cookie over plain http has Secure (a browser would not send it back): %q", set)
	}

	// Over TLS, or with an https public URL, the cookie is Secure.
	store := e.store
	tlsEnv := &testEnv{t: t, store: store}
	a, err := newApp(e.app.appConfig)
	if err != nil {
		t.Fatal(err)
	}
	tlsEnv.app = a
	tlsEnv.srv = httptest.NewTLSServer(a)
	defer tlsEnv.srv.Close()
	tb := tlsEnv.browser()
	tb.c.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	r = tb.login("cookie@example.com", testPassword)
	expectStatus(t, "log-in over TLS", r, http.StatusSeeOther)
	if c := r.header.Values("Set-Cookie"); !strings.Contains(strings.Join(c, "\n"), "Secure") {
		t.Errorf("cookies over TLS are not Secure: %q", c)
	}
}

func TestSignUpErrors(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	b.signup("taken@example.com")
	b2 := e.browser()
	for _, c := range []struct {
		name, email, password string
		status                int
		msg                   string
	}{
		{"duplicate email", "TAKEN@example.com", testPassword, http.StatusConflict, "An account with this email already exists"},
		{"weak password", "new@example.com", "short", http.StatusBadRequest, "Use at least 10 characters."},
		{"common password", "new@example.com", "1234567890", http.StatusBadRequest, "too common"},
		{"password is the email", "someone@example.com", "someone@example.com", http.StatusBadRequest, "email address as the password"},
		{"invalid email", "not-an-email", testPassword, http.StatusBadRequest, "Enter a valid email address"},
	} {
		r := b2.post("/account/signup", "csrf_token", b2.csrf("/account/signup"), "email", c.email, "password", c.password)
		if r.status != c.status || !strings.Contains(r.body, c.msg) {
			t.Errorf("%s: %d, want %d with %q\n%s", c.name, r.status, c.status, c.msg, r.body)
		}
		mustContain(t, c.name, r.body, `role="alert"`)
		if strings.Contains(r.body, c.password) && len(c.password) > 5 && c.password != c.email {
			t.Errorf("%s: the page echoes the password", c.name)
		}
	}
	if _, err := e.store.GetAccountByEmail(bg, "new@example.com"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a refused sign-up created an account: %v", err)
	}

	// CSRF: missing, wrong, and a token without its cookie.
	tok := b2.csrf("/account/signup")
	wrong := "x" + tok[1:]
	if tok[0] == 'x' { // a changed token must differ from the real one
		wrong = "y" + tok[1:]
	}
	for name, fields := range map[string][]string{
		"missing": {"email", "csrf1@example.com", "password", testPassword},
		"wrong":   {"csrf_token", wrong, "email", "csrf2@example.com", "password", testPassword},
	} {
		r := b2.post("/account/signup", fields...)
		expectStatus(t, "sign-up with "+name+" CSRF token", r, http.StatusForbidden)
	}
	b3 := e.browser() // has never loaded the form: no cookie
	r := b3.post("/account/signup", "csrf_token", tok, "email", "csrf3@example.com", "password", testPassword)
	expectStatus(t, "sign-up with another browser's CSRF token", r, http.StatusForbidden)
	for _, em := range []string{"csrf1@example.com", "csrf2@example.com", "csrf3@example.com"} {
		if _, err := e.store.GetAccountByEmail(bg, em); err == nil {
			t.Errorf("a sign-up without a valid CSRF token created %s", em)
		}
	}
}

func TestLogInErrorsAreAlike(t *testing.T) {
	e := newTestEnv(t)
	e.browser().signup("known@example.com")
	b := e.browser()
	wrong := b.login("known@example.com", "not the password")
	unknown := b.login("unknown@example.com", "not the password")
	expectStatus(t, "wrong password", wrong, http.StatusUnauthorized)
	expectStatus(t, "unknown email", unknown, http.StatusUnauthorized)
	norm := func(s string) string {
		s = strings.ReplaceAll(s, "unknown@example.com", "EMAIL")
		s = strings.ReplaceAll(s, "known@example.com", "EMAIL")
		return csrfRe.ReplaceAllString(s, "CSRF")
	}
	if norm(wrong.body) != norm(unknown.body) {
		t.Fatalf("the pages for a wrong password and an unknown email differ:\n%s\n----\n%s", wrong.body, unknown.body)
	}
	mustContain(t, "failed log-in", wrong.body, badLogin)
	if b.cookie("textgen_session") != nil {
		t.Fatal("a failed log-in set a session cookie")
	}

	// CSRF missing or wrong.
	r := b.post("/account/login", "email", "known@example.com", "password", testPassword)
	expectStatus(t, "log-in without CSRF token", r, http.StatusForbidden)
	r = b.post("/account/login", "csrf_token", "forged", "email", "known@example.com", "password", testPassword)
	expectStatus(t, "log-in with a wrong CSRF token", r, http.StatusForbidden)

	// Disabled account: refused after the password check, with its own message.
	a, _ := e.store.GetAccountByEmail(bg, "known@example.com")
	if _, err := e.store.SetAccountStatus(bg, a.ID, ledger.StatusDisabled); err != nil {
		t.Fatal(err)
	}
	r = b.login("known@example.com", testPassword)
	expectStatus(t, "log-in to a disabled account", r, http.StatusForbidden)
	mustContain(t, "disabled", r.body, "This account is disabled")
}

func TestLogInThrottled(t *testing.T) {
	e := newTestEnv(t)
	e.browser().signup("victim@example.com")
	var clock atomic.Pointer[time.Time]
	t0 := time.Now()
	clock.Store(&t0)
	setClock(t, &clock)

	b := e.browser()
	for i := range 5 {
		r := b.login("victim@example.com", "guess number "+string(rune('a'+i)))
		expectStatus(t, "failed attempt", r, http.StatusUnauthorized)
	}
	// The sixth attempt is refused before the password is checked, even the right one.
	r := b.login("victim@example.com", testPassword)
	expectStatus(t, "throttled log-in", r, http.StatusTooManyRequests)
	mustContain(t, "throttled", r.body, "Too many attempts. Please wait 15 minutes")
	if r.header.Get("Retry-After") != "900" {
		t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// Unknown emails are throttled the same way (no hint which emails exist).
	for range 5 {
		b.login("nobody@example.com", "guess")
	}
	expectStatus(t, "throttled unknown email", b.login("nobody@example.com", "guess"), http.StatusTooManyRequests)

	// After the window the account can log in again.
	t1 := t0.Add(15*time.Minute + time.Second)
	clock.Store(&t1)
	expectStatus(t, "log-in after the window", b.login("victim@example.com", testPassword), http.StatusSeeOther)
	// A successful log-in clears the account's failures: five more wrong passwords are checked
	// (not refused) in the same window, and only the sixth is throttled.
	b3 := e.browser()
	for range 5 {
		expectStatus(t, "failure after a success", b3.login("victim@example.com", "wrong again"), http.StatusUnauthorized)
	}
	expectStatus(t, "sixth attempt after the success", b3.login("victim@example.com", testPassword), http.StatusTooManyRequests)

	// Per client address: 30 failures over any emails, then even a new email is refused.
	e2 := newTestEnv(t)
	b2 := e2.browser()
	for i := range 30 {
		r := b2.login("spray"+string(rune('a'+i%26))+string(rune('a'+i/26))+"@example.com", "guess")
		expectStatus(t, "spray attempt", r, http.StatusUnauthorized)
	}
	expectStatus(t, "throttled address", b2.login("fresh@example.com", "guess"), http.StatusTooManyRequests)
}

// TestLogInOwnerNotLockedOut: wrong passwords lock out the address that sends them, not the
// account: its owner logs in from elsewhere.
func TestLogInOwnerNotLockedOut(t *testing.T) {
	e := newTestEnv(t)
	e.browser().signup("owner@example.com")
	attacker := e.browserFrom("127.0.0.2")
	for i := range 5 {
		expectStatus(t, "wrong password", attacker.login("owner@example.com", fmt.Sprint("guess ", i)), http.StatusUnauthorized)
	}
	expectStatus(t, "the attacker's sixth attempt", attacker.login("owner@example.com", testPassword), http.StatusTooManyRequests)
	owner := e.browserFrom("127.0.0.3")
	expectStatus(t, "the owner from another address", owner.login("owner@example.com", testPassword), http.StatusSeeOther)
}

// TestLogInSlowDown: failures of one account from many addresses slow its log-ins down
// (each waits, one at a time) past 20, but never refuse them, so the owner still gets in.
func TestLogInSlowDown(t *testing.T) {
	e := newTestEnv(t)
	e.browser().signup("target@example.com")
	var slowed atomic.Int64
	old := slowDown
	slowDown = func(context.Context, time.Duration) error { slowed.Add(1); return nil }
	t.Cleanup(func() { slowDown = old })
	for i := range 22 {
		b := e.browserFrom(fmt.Sprintf("127.0.1.%d", i+1))
		expectStatus(t, fmt.Sprint("guess from address ", i+1), b.login("target@example.com", "guess"), http.StatusUnauthorized)
		if want := max(0, i+1-20); slowed.Load() != int64(want) {
			t.Fatalf("after %d failures from as many addresses: %d slowed down, want %d", i+1, slowed.Load(), want)
		}
	}
	owner := e.browserFrom("127.0.2.1")
	expectStatus(t, "the owner during the attack", owner.login("target@example.com", testPassword), http.StatusSeeOther)
	if slowed.Load() != 3 {
		t.Errorf("the owner's log-in was not slowed down like the others: %d", slowed.Load())
	}
}

// TestLogInThrottledInParallel: wrong passwords sent all at once are limited like ones sent one
// by one: each attempt is counted before its password is checked.
func TestLogInThrottledInParallel(t *testing.T) {
	e := newTestEnv(t)
	e.browser().signup("burst@example.com")
	b := e.browser()
	tok := b.csrf("/account/login")
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := b.post("/account/login", "csrf_token", tok, "email", "burst@example.com", "password", fmt.Sprint("guess ", i))
			mu.Lock()
			codes[r.status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[http.StatusUnauthorized] != 5 || codes[http.StatusTooManyRequests] != 15 {
		t.Fatalf("20 parallel wrong passwords: %v, want 5x401 and 15x429", codes)
	}
}

// TestSignUpThrottled: sign-ups per client address are limited, "already exists" answers
// included (else they would tell, unlimited, which emails have accounts); a weak password is
// not counted.
func TestSignUpThrottled(t *testing.T) {
	e := newTestEnv(t)
	e.browser().signup("taken@example.com")
	b := e.browser() // not logged in; same client address
	weak := b.post("/account/signup", "csrf_token", b.csrf("/account/signup"), "email", "weak@example.com", "password", "short")
	expectStatus(t, "weak password", weak, http.StatusBadRequest)
	for i := range 9 {
		r := b.post("/account/signup", "csrf_token", b.csrf("/account/signup"), "email", "taken@example.com", "password", testPassword)
		expectStatus(t, fmt.Sprint("probe ", i), r, http.StatusConflict)
	}
	r := b.post("/account/signup", "csrf_token", b.csrf("/account/signup"), "email", "new@example.com", "password", testPassword)
	expectStatus(t, "eleventh sign-up from one address", r, http.StatusTooManyRequests)
	mustContain(t, "throttled sign-up", r.body, "Too many attempts")
}

func TestExpiredSession(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	acct := b.signup("expiry@example.com")
	tok := b.csrf("/account/keys")

	var clock atomic.Pointer[time.Time]
	later := time.Now().Add(12*time.Hour + time.Minute)
	clock.Store(&later)
	setClock(t, &clock)

	r := b.get("/account/")
	if r.status != http.StatusSeeOther || r.location() != "/account/login?expired=1" {
		t.Fatalf("expired session: %d %q", r.status, r.location())
	}
	// A form posted with an expired session does nothing.
	r = b.post("/account/keys", "csrf_token", tok, "name", "late", "mode", "live")
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location(), "/account/login") {
		t.Fatalf("POST with an expired session: %d %q", r.status, r.location())
	}
	if keys, _ := e.store.ListKeys(bg, acct.ID); len(keys) != 0 {
		t.Fatalf("a key was created with an expired session: %+v", keys)
	}
	r = b.get("/account/login?expired=1")
	mustContain(t, "log-in page", r.body, "Your session has ended")
}

func TestDisabledAccountSessionEnds(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	acct := b.signup("disable-me@example.com")
	if _, err := e.store.SetAccountStatus(bg, acct.ID, ledger.StatusDisabled); err != nil {
		t.Fatal(err)
	}
	if r := b.get("/account/"); r.status != http.StatusSeeOther {
		t.Fatalf("disabled account's session still works: %d", r.status)
	}
}

// TestCSRFOnEveryForm posts every logged-in form without a token and with a wrong one: 403 and
// nothing changes.
func TestCSRFOnEveryForm(t *testing.T) {
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", "whsec_test"))
	b := e.browser()
	acct := b.signup("csrf@example.com")
	_, key, err := e.store.CreateKey(bg, acct.ID, ledger.Live, "existing", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Hold(bg, ledger.HoldRequest{AccountID: acct.ID, Mode: ledger.Test, RequestID: "req_1"}); err != nil {
		t.Fatal(err)
	}
	forms := map[string][]string{
		"/account/logout":       nil,
		"/account/keys":         {"name", "sneaky", "mode", "live"},
		"/account/keys/revoke":  {"id", key.ID},
		"/account/test-credits": nil,
		"/account/buy":          {"package", "10"},
	}
	for path, fields := range forms {
		for _, tok := range []string{"", "wrong-token"} {
			f := append([]string{}, fields...)
			if tok != "" {
				f = append(f, "csrf_token", tok)
			}
			r := b.post(path, f...)
			if r.status != http.StatusForbidden {
				t.Errorf("POST %s with CSRF token %q: %d, want 403", path, tok, r.status)
			}
		}
	}
	// Nothing happened: still logged in, no new key, key not revoked, no refill.
	expectStatus(t, "dashboard", b.get("/account/"), http.StatusOK)
	keys, _ := e.store.ListKeys(bg, acct.ID)
	if len(keys) != 1 || !keys[0].Revoked.IsZero() {
		t.Fatalf("keys changed: %+v", keys)
	}
	if bal, _ := e.store.Balance(bg, acct.ID); bal.TestAvailable != 49 {
		t.Fatalf("test credits changed: %+v", bal)
	}
	// Another session's token does not work either.
	other := e.browser()
	other.signup("other@example.com")
	r := b.post("/account/keys", "csrf_token", other.csrf("/account/keys"), "name", "x", "mode", "live")
	expectStatus(t, "another session's CSRF token", r, http.StatusForbidden)
}

func TestCrossSitePostRefused(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	b.signup("xsite@example.com")
	tok := b.csrf("/account/keys")
	hdr := http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}}
	r := b.postHdr("/account/keys", hdr, "csrf_token", tok, "name", "x", "mode", "live")
	expectStatus(t, "cross-site POST", r, http.StatusForbidden)
	// A valid token and password: only the cross-site origin is wrong.
	b2 := e.browser()
	r = b2.postHdr("/account/login", hdr, "csrf_token", b2.csrf("/account/login"), "email", "xsite@example.com", "password", testPassword)
	expectStatus(t, "cross-site log-in", r, http.StatusForbidden)
	expectStatus(t, "same log-in from the site", b2.login("xsite@example.com", testPassword), http.StatusSeeOther)
}

var fullKeyRe = regexp.MustCompile(`tg_(live|test)_[0-9A-Za-z]{36}`)

func TestKeys(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	acct := b.signup("keys@example.com")

	r := b.get("/account/keys")
	expectStatus(t, "keys page", r, http.StatusOK)
	mustContain(t, "keys page", r.body, "You have no keys yet", `<label for="key-name">Name</label>`, "<legend>Kind</legend>")

	r = b.post("/account/keys", "csrf_token", b.csrf("/account/keys"), "name", "laptop", "mode", "live")
	expectStatus(t, "create key", r, http.StatusCreated)
	full := fullKeyRe.FindString(r.body)
	if full == "" || !strings.HasPrefix(full, "tg_live_") {
		t.Fatalf("no full key on the page:\n%s", r.body)
	}
	mustContain(t, "new key page", r.body, "You will not see it again", `data-copy="new-key"`, `role="status"`)
	if r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("the page with the full key is cacheable: %q", r.header.Get("Cache-Control"))
	}
	k, a, err := e.store.LookupKey(bg, full)
	if err != nil || a.ID != acct.ID || k.Name != "laptop" || k.Mode != ledger.Live {
		t.Fatalf("the shown key does not work: %+v %v", k, err)
	}
	// The list shows prefix and last 4 only.
	r = b.get("/account/keys")
	mustContain(t, "key list", r.body, "laptop", "tg_live_…"+full[len(full)-4:], time.Now().UTC().Format("2006-01-02")) // made today
	mustNotContain(t, "key list", r.body, full)

	r = b.post("/account/keys", "csrf_token", b.csrf("/account/keys"), "name", "ci", "mode", "test")
	expectStatus(t, "create test key", r, http.StatusCreated)
	if tk := fullKeyRe.FindString(r.body); !strings.HasPrefix(tk, "tg_test_") {
		t.Fatalf("test key %q", tk)
	}
	mustContain(t, "key list", b.get("/account/keys").body, `<td data-label="Last used (UTC)">never</td>`) // the test key, never used

	// Form errors.
	for _, c := range []struct {
		name, mode string
		status     int
		msg        string
	}{
		{"", "live", http.StatusBadRequest, "Give the key a name"},
		{strings.Repeat("n", 61), "live", http.StatusBadRequest, "at most 60 characters"},
		{"bad\x01name", "live", http.StatusBadRequest, "at most 60 characters"},
		{"x", "prod", http.StatusBadRequest, "Choose a live key or a test key"},
	} {
		r := b.post("/account/keys", "csrf_token", b.csrf("/account/keys"), "name", c.name, "mode", c.mode)
		if r.status != c.status || !strings.Contains(r.body, c.msg) {
			t.Errorf("create key %q/%q: %d, want %d with %q", c.name, c.mode, r.status, c.status, c.msg)
		}
	}
	// The limit of active keys (3 in this env).
	expectStatus(t, "third key", b.post("/account/keys", "csrf_token", b.csrf("/account/keys"), "name", "third", "mode", "live"), http.StatusCreated)
	r = b.post("/account/keys", "csrf_token", b.csrf("/account/keys"), "name", "fourth", "mode", "live")
	expectStatus(t, "fourth key", r, http.StatusConflict)
	mustContain(t, "fourth key", r.body, "Revoke one you no longer use")

	// Revoke with a confirmation step.
	r = b.get("/account/keys/revoke?id=" + k.ID)
	expectStatus(t, "confirm page", r, http.StatusOK)
	mustContain(t, "confirm page", r.body, "Revoke <strong>laptop</strong>", "cannot be undone", `value="`+k.ID+`"`, "Cancel")
	if kk, _, err := e.store.LookupKey(bg, full); err != nil || !kk.Revoked.IsZero() {
		t.Fatal("the confirmation page revoked the key")
	}
	r = b.post("/account/keys/revoke", "csrf_token", b.csrf("/account/keys"), "id", k.ID)
	if r.status != http.StatusSeeOther || r.location() != "/account/keys?revoked="+k.ID {
		t.Fatalf("revoke: %d %q", r.status, r.location())
	}
	if _, _, err := e.store.LookupKey(bg, full); !errors.Is(err, ledger.ErrInvalidKey) {
		t.Fatalf("revoked key still works: %v", err)
	}
	r = b.get(r.location())
	mustContain(t, "key list after revoke", r.body, "is revoked", "Revoked ")
	// Revoking twice is harmless; the confirmation page of a revoked key goes back to the list.
	r = b.post("/account/keys/revoke", "csrf_token", b.csrf("/account/keys"), "id", k.ID)
	expectStatus(t, "revoke again", r, http.StatusSeeOther)
	if r := b.get("/account/keys/revoke?id=" + k.ID); r.status != http.StatusSeeOther {
		t.Fatalf("confirm page of a revoked key: %d", r.status)
	}
	// Now a fourth active key fits again.
	expectStatus(t, "key after revoke", b.post("/account/keys", "csrf_token", b.csrf("/account/keys"), "name", "fourth", "mode", "live"), http.StatusCreated)
}

// TestKeysCreatedAllAtOnce: thirty key creations sent at once with one session never leave
// more active keys than max_keys (3 in this env); the rest get the page's 409.
func TestKeysCreatedAllAtOnce(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	acct := b.signup("race@example.com")
	tok := b.csrf("/account/keys")
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := b.post("/account/keys", "csrf_token", tok, "name", fmt.Sprint("k", i), "mode", "live")
			mu.Lock()
			codes[r.status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	keys, err := e.store.ListKeys(bg, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || codes[http.StatusCreated] != 3 || codes[http.StatusConflict] != 27 {
		t.Fatalf("30 creations at once: %v, %d keys; want 3x201, 27x409 and 3 keys", codes, len(keys))
	}
}

func TestRevokeSomeoneElsesKey(t *testing.T) {
	e := newTestEnv(t)
	alice := e.browser()
	aliceAcct := alice.signup("alice@example.com")
	full, ak, err := e.store.CreateKey(bg, aliceAcct.ID, ledger.Live, "alice's", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	mallory := e.browser()
	mallory.signup("mallory@example.com")
	r := mallory.get("/account/keys/revoke?id=" + ak.ID)
	expectStatus(t, "confirm page of another account's key", r, http.StatusNotFound)
	mustNotContain(t, "confirm page", r.body, "alice's")
	r = mallory.post("/account/keys/revoke", "csrf_token", mallory.csrf("/account/keys"), "id", ak.ID)
	expectStatus(t, "revoke another account's key", r, http.StatusNotFound)
	mustContain(t, "revoke another's key", r.body, "You have no key with this id")
	if _, _, err := e.store.LookupKey(bg, full); err != nil {
		t.Fatalf("alice's key no longer works: %v", err)
	}
	r = mallory.post("/account/keys/revoke", "csrf_token", mallory.csrf("/account/keys"), "id", "key_doesnotexist")
	expectStatus(t, "revoke an unknown key", r, http.StatusNotFound)
	// Mallory's list does not show Alice's key.
	mustNotContain(t, "mallory's keys", mallory.get("/account/keys").body, "alice's")
}

func TestDashboardRequestsPurchasesAndRefill(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	acct := b.signup("dash@example.com")
	ctx := bg
	if _, err := e.store.Grant(ctx, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindPurchase,
		Credits: 10, Reference: "cs_test_dashboard", AmountCents: 200, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}
	hold := func(rid, tool string, m ledger.Mode) {
		if _, err := e.store.Hold(ctx, ledger.HoldRequest{AccountID: acct.ID, Mode: m, RequestID: rid, KeyID: "key_x", Tool: tool}); err != nil {
			t.Fatal(err)
		}
	}
	hold("req_settled", "summarizer", ledger.Live)
	e.store.Settle(ctx, acct.ID, "req_settled")
	hold("req_voided", "email-writer", ledger.Live)
	e.store.Void(ctx, acct.ID, "req_voided", "backend_timeout")
	hold("req_open", "translator", ledger.Test)

	r := b.get("/account/")
	expectStatus(t, "dashboard", r, http.StatusOK)
	mustContain(t, "dashboard", r.body,
		`aria-labelledby="live-label">9<`, // 10 bought, 1 charged; the open hold is a test hold
		"summarizer", "charged", "email-writer", "not charged", "backend_timeout", "translator", "in progress",
		"€2.00", "cs_test_dashboard", "<th scope=\"col\">Time (UTC)</th>")
	// The open test hold: 50 - 1.
	mustContain(t, "dashboard", r.body, `aria-labelledby="test-label">49<`)

	// Refill tops the test credits back up to 50.
	r = b.post("/account/test-credits", "csrf_token", b.csrf("/account/"))
	if r.status != http.StatusSeeOther || r.location() != "/account/?refilled=1" {
		t.Fatalf("refill: %d %q", r.status, r.location())
	}
	r = b.get(r.location())
	mustContain(t, "dashboard after refill", r.body, "Added 1 test credits.", `aria-labelledby="test-label">50<`)
	r = b.post("/account/test-credits", "csrf_token", b.csrf("/account/"))
	mustContain(t, "dashboard after a second refill", b.get(r.location()).body, "full already (50)")
	if rep, err := e.store.Verify(ctx); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

func TestLatestRequestsOrderAndLimit(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var entries []ledger.Entry // newest first, as History returns them
	for i := 29; i >= 0; i-- {
		rid := "req_" + string(rune('A'+i))
		entries = append(entries,
			ledger.Entry{Kind: ledger.KindSettle, RequestID: rid, Amount: -1, Mode: ledger.Live, Time: t0.Add(time.Duration(i)*time.Minute + time.Second)},
			ledger.Entry{Kind: ledger.KindHold, RequestID: rid, Tool: "t", Mode: ledger.Live, Time: t0.Add(time.Duration(i) * time.Minute)})
	}
	rows := latestRequests(entries, 20)
	if len(rows) != 20 || !rows[0].Time.Equal(t0.Add(29*time.Minute)) || rows[0].Credits != 1 || rows[0].Status != "charged" {
		t.Fatalf("rows %+v", rows[:2])
	}
}

func TestBuyWithoutStripeAndUnknownPackage(t *testing.T) {
	e := newTestEnv(t) // no Stripe configured
	b := e.browser()
	acct := b.signup("nostripe@example.com")
	r := b.get("/account/buy")
	// It says what to do instead: whom to ask, for which account, and the command that credits it.
	mustContain(t, "buy page without Stripe", r.body, "does not sell credits online", "your account, <code>"+acct.ID+"</code>",
		"caddy textgen credits grant --account "+acct.ID+" --credits &lt;n&gt;")
	r = b.post("/account/buy", "csrf_token", b.csrf("/account/buy"), "package", "10")
	expectStatus(t, "buy without Stripe", r, http.StatusServiceUnavailable)
	mustContain(t, "buy without Stripe", r.body, "caddy textgen credits grant --account "+acct.ID)
	r = b.post("/account/stripe/webhook")
	expectStatus(t, "webhook without Stripe", r, http.StatusNotFound)

	// Unknown package: refused before Stripe is called (the Stripe URL here is dead).
	e2 := newTestEnv(t, withStripe("http://127.0.0.1:1", "whsec_test"))
	b2 := e2.browser()
	b2.signup("unknownpkg@example.com")
	r = b2.post("/account/buy", "csrf_token", b2.csrf("/account/buy"), "package", "999")
	expectStatus(t, "buy an unknown package", r, http.StatusBadRequest)
	mustContain(t, "unknown package", r.body, "There is no such package")
	r = b2.post("/account/buy", "csrf_token", b2.csrf("/account/buy"), "package", "")
	expectStatus(t, "buy without a package", r, http.StatusBadRequest)
}

func TestPagesAndHeaders(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	r := b.get("/account/login")
	h := r.header
	if !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") || h.Get("X-Frame-Options") != "DENY" ||
		h.Get("Cache-Control") != "no-store" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("security headers %v", h)
	}
	// Assets are embedded, versioned and cacheable; pages reference nothing external.
	css := regexp.MustCompile(`href="(/account/assets/style\.css\?v=[0-9a-f]+)"`).FindStringSubmatch(r.body)
	if css == nil {
		t.Fatalf("no stylesheet link:\n%s", r.body)
	}
	ar := b.get(css[1])
	if ar.status != 200 || !strings.HasPrefix(ar.header.Get("Content-Type"), "text/css") || !strings.Contains(ar.header.Get("Cache-Control"), "immutable") {
		t.Fatalf("stylesheet: %d %v", ar.status, ar.header)
	}
	mustContain(t, "stylesheet", ar.body, ":focus-visible", "@media")
	if js := b.get("/account/assets/app.js"); js.status != 200 || !strings.Contains(js.body, "clipboard") {
		t.Fatalf("script: %d", js.status)
	}
	for _, p := range []string{"/account/login", "/account/signup"} {
		mustNotContain(t, p, b.get(p).body, "http://", "https://", "//cdn")
	}
	expectStatus(t, "unknown asset", b.get("/account/assets/nope.css"), http.StatusNotFound)
	expectStatus(t, "unknown page", b.get("/account/nope"), http.StatusNotFound)
	if r := b.get("/account"); r.status != http.StatusSeeOther || r.location() != "/account/" {
		t.Fatalf("/account: %d %q", r.status, r.location())
	}
	req, _ := http.NewRequest(http.MethodDelete, e.srv.URL+"/account/login", nil)
	if r := b.do(req); r.status != http.StatusMethodNotAllowed && r.status != http.StatusNotFound {
		t.Fatalf("DELETE /account/login: %d", r.status)
	}
	// Every logged-in page redirects to the log-in page without a session.
	for _, p := range []string{"/account/", "/account/keys", "/account/buy", "/account/buy/success", "/account/buy/cancel", "/account/keys/revoke?id=x"} {
		if r := b.get(p); r.status != http.StatusSeeOther || r.location() != "/account/login" {
			t.Errorf("GET %s without a session: %d %q", p, r.status, r.location())
		}
	}
}

func TestFormatEuro(t *testing.T) {
	for cents, want := range map[int64]string{200: "€2.00", 5: "€0.05", 123456: "€1234.56", 0: "€0.00", -150: "-€1.50"} {
		if got := formatEuro(cents); got != want {
			t.Errorf("formatEuro(%d) = %q, want %q", cents, got, want)
		}
	}
}
