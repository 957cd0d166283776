package account

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

var bg = context.Background()

const testPassword = "correct horse battery"

// testEnv is the account area on an in-memory ledger behind an httptest server.
type testEnv struct {
	t     *testing.T
	store ledger.Store
	app   *app
	srv   *httptest.Server
}

type envOpt func(*appConfig)

func newTestEnv(t *testing.T, opts ...envOpt) *testEnv {
	t.Helper()
	store, err := badgerledger.Open("", badgerledger.Options{InMemory: true, SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return newTestEnvOn(t, store, opts...)
}

func newTestEnvOn(t *testing.T, store ledger.Store, opts ...envOpt) *testEnv {
	t.Helper()
	cfg := appConfig{
		store:            store,
		logger:           zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
		prefix:           "/account",
		sessionLifetime:  12 * time.Hour,
		cookieName:       "textgen_session",
		webhookTolerance: 5 * time.Minute,
		packages:         []Package{{ID: "10", Credits: 10, PriceCents: 200}, {ID: "50", Credits: 50, PriceCents: 900}},
		testCredits:      50,
		siteName:         "Test API",
		maxKeys:          3,
	}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := newApp(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close) // the senders stop before the store closes
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return &testEnv{t: t, store: store, app: a, srv: srv}
}

// withStripe switches buying on against the given Stripe API base URL.
func withStripe(apiURL, webhookSecret string) envOpt {
	return func(c *appConfig) {
		c.stripeKey = "sk_test_123"
		c.webhookSecret = webhookSecret
		c.stripeAPIURL = apiURL
	}
}

// setClock fixes the account area's clock (not the ledger's) until the test ends.
func setClock(t *testing.T, at *atomic.Pointer[time.Time]) {
	old := now
	now = func() time.Time { return *at.Load() }
	t.Cleanup(func() { now = old })
}

// browser is a client with its own cookie jar that does not follow redirects.
type browser struct {
	t    *testing.T
	e    *testEnv
	c    *http.Client
	jar  *cookiejar.Jar
	base string
}

func (e *testEnv) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: e.t, e: e, jar: jar, base: e.srv.URL, c: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// browserFrom is a browser whose connections come from addr, another loopback address such as
// 127.0.0.2: a client at another address, for the limits per client address.
func (e *testEnv) browserFrom(addr string) *browser {
	b := e.browser()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}
	b.c.Transport = &http.Transport{DialContext: d.DialContext}
	return b
}

type resp struct {
	status int
	header http.Header
	body   string
}

func (r resp) location() string { return r.header.Get("Location") }

func (b *browser) do(req *http.Request) resp {
	b.t.Helper()
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, string(body)}
}

func (b *browser) get(path string) resp {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
	return b.do(req)
}

// post sends a form; fields are name, value pairs.
func (b *browser) post(path string, fields ...string) resp {
	b.t.Helper()
	return b.postHdr(path, nil, fields...)
}

func (b *browser) postHdr(path string, hdr http.Header, fields ...string) resp {
	b.t.Helper()
	form := url.Values{}
	for i := 0; i+1 < len(fields); i += 2 {
		form.Add(fields[i], fields[i+1])
	}
	req, _ := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header[k] = v
	}
	return b.do(req)
}

var csrfRe = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// csrf fetches a page and returns the CSRF token of its first form.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	r := b.get(path)
	m := csrfRe.FindStringSubmatch(r.body)
	if m == nil {
		b.t.Fatalf("GET %s (%d): no csrf_token in the page:\n%s", path, r.status, r.body)
	}
	return m[1]
}

// signup creates an account through the form and leaves the browser logged in.
func (b *browser) signup(email string) ledger.Account {
	b.t.Helper()
	r := b.post("/account/signup", "csrf_token", b.csrf("/account/signup"), "email", email, "password", testPassword)
	if r.status != http.StatusSeeOther || r.location() != "/account/" {
		b.t.Fatalf("sign-up: %d %s\n%s", r.status, r.location(), r.body)
	}
	a, err := b.e.store.GetAccountByEmail(bg, email)
	if err != nil {
		b.t.Fatal(err)
	}
	return a
}

func (b *browser) login(email, password string) resp {
	b.t.Helper()
	return b.post("/account/login", "csrf_token", b.csrf("/account/login"), "email", email, "password", password)
}

func (b *browser) cookie(name string) *http.Cookie {
	u, _ := url.Parse(b.base + "/account/")
	for _, c := range b.jar.Cookies(u) {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func mustContain(t *testing.T, what, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(body, s) {
			t.Fatalf("%s does not contain %q:\n%s", what, s, body)
		}
	}
}

func mustNotContain(t *testing.T, what, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(body, s) {
			t.Fatalf("%s contains %q:\n%s", what, s, body)
		}
	}
}

func expectStatus(t *testing.T, what string, r resp, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d\n%s", what, r.status, status, r.body)
	}
}

func uniqueEmail(prefix string) string {
	return fmt.Sprintf("%s-%d@example.com", prefix, time.Now().UnixNano())
}

// requestOn runs one request through the ledger as the generate handler does: a hold, then a
// charge or a release.
func requestOn(t *testing.T, store ledger.Store, acct, rid, tool string, m ledger.Mode, charge bool) {
	t.Helper()
	if _, err := store.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: m, RequestID: rid, KeyID: "key_x", Tool: tool}); err != nil {
		t.Fatal(err)
	}
	var err error
	if charge {
		_, err = store.Settle(bg, acct, rid)
	} else {
		_, err = store.Void(bg, acct, rid, "backend_error")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// mustGrant books a grant or purchase for the test.
func mustGrant(t *testing.T, store ledger.Store, req ledger.GrantRequest) {
	t.Helper()
	if _, err := store.Grant(bg, req); err != nil {
		t.Fatal(err)
	}
}
