package console

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/caddy-textgen/textgen/caddymodule/internal/opauth"
	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
	"github.com/caddy-textgen/textgen/ledger/pgledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

var bg = context.Background()

// engines are the two ledger engines every console test runs on: Badger on disk and a real
// PostgreSQL.
var engines = []struct {
	name string
	open func(t *testing.T) ledger.Store
}{
	{"badger", func(t *testing.T) ledger.Store {
		s, err := badgerledger.Open(t.TempDir(), badgerledger.Options{SweepInterval: -1, LastUsedFlushInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"postgres", func(t *testing.T) ledger.Store {
		s, err := pgledger.OpenPostgres(bg, pgtest.NewDatabase(t), pgledger.PostgresOptions{SweepInterval: -1, LastUsedFlushInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

// env is the console on a real ledger behind an httptest server.
type env struct {
	t      *testing.T
	store  ledger.Store
	sealer *sealing.Sealer
	srv    *httptest.Server
}

func newEnv(t *testing.T, store ledger.Store) *env {
	t.Helper()
	return newEnvLimits(t, store, nil)
}

// newEnvLimits is newEnv with the log-in throttles in limits (a limits_store), nil: in memory.
func newEnvLimits(t *testing.T, store ledger.Store, limits *ratelimit.Shared) *env {
	t.Helper()
	sealer, err := sealing.New(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	a := newApp(appConfig{
		store: store, sealer: sealer, limits: limits, limitsName: "test", logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)),
		prefix: "/console", sessionLifetime: 8 * time.Hour, idleTimeout: 30 * time.Minute,
		cookieName: "textgen_console", supportGrantLimit: 100, siteName: "Test API",
	})
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return &env{t: t, store: store, sealer: sealer, srv: srv}
}

// setClock fixes the console's clock (TOTP codes) at *at for the test.
func setClock(t *testing.T, at *time.Time) {
	old := now
	now = func() time.Time { return *at }
	t.Cleanup(func() { now = old })
}

// enroll makes an operator as `caddy textgen operator create` does.
func (e *env) enroll(email string, role ledger.OperatorRole) opauth.Enrollment {
	e.t.Helper()
	en, err := opauth.Enroll(bg, e.store, e.sealer, "Test API", email, role, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return en
}

type resp struct {
	status int
	body   string
	header http.Header
}

type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func (e *env) client() *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: e.t, base: e.srv.URL, http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) do(req *http.Request) resp {
	c.t.Helper()
	res, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, string(b), res.Header}
}

func (c *client) get(path string) resp {
	req, _ := http.NewRequest(http.MethodGet, c.base+path, nil)
	return c.do(req)
}

// post sends a form as a same-origin browser would.
func (c *client) post(path string, fields ...string) resp {
	return c.postHdr(path, http.Header{"Sec-Fetch-Site": {"same-origin"}}, fields...)
}

func (c *client) postHdr(path string, hdr http.Header, fields ...string) resp {
	c.t.Helper()
	v := url.Values{}
	for i := 0; i+1 < len(fields); i += 2 {
		v.Add(fields[i], fields[i+1])
	}
	req, _ := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	return c.do(req)
}

var csrfRe = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// csrf is the CSRF token of the form on the page at path.
func (c *client) csrf(path string) string {
	c.t.Helper()
	r := c.get(path)
	m := csrfRe.FindStringSubmatch(r.body)
	if m == nil {
		c.t.Fatalf("no CSRF token on %s (%d): %s", path, r.status, r.body)
	}
	return m[1]
}

// login logs in with the code given.
func (c *client) login(email, password, code string) resp {
	c.t.Helper()
	return c.post("/console/login", "csrf_token", c.csrf("/console/login"), "email", email, "password", password, "code", code)
}

func (c *client) cookie(name string) string {
	u, _ := url.Parse(c.base + "/console/")
	for _, ck := range c.http.Jar.Cookies(u) {
		if ck.Name == name {
			return ck.Value
		}
	}
	return ""
}

func code(t *testing.T, en opauth.Enrollment, at time.Time) string {
	t.Helper()
	c, err := opauth.Code(en.TOTPSecret, at)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func expectStatus(t *testing.T, what string, r resp, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d; body:\n%s", what, r.status, status, r.body)
	}
}

func mustContain(t *testing.T, what, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(body, s) {
			t.Fatalf("%s: %q not found in:\n%s", what, s, body)
		}
	}
}
