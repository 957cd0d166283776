package account

// The package's shared real parts: stripe-mock, the real Ollama, and the in-process Caddy that
// caddytest starts on first use, on free ports picked when the test binary starts.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	_ "github.com/caddy-textgen/textgen/caddymodule"
	"github.com/caddy-textgen/textgen/caddymodule/account/stripemocktest"
	"github.com/caddy-textgen/textgen/internal/freeport"
	"github.com/caddy-textgen/textgen/internal/tier"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

var (
	stripeOnce sync.Once
	stripeSrv  *stripemocktest.Server
	stripeErr  error

	ollamaOnce sync.Once
	ollamaSrv  *ollamatest.Server
	ollamaErr  error

	// testRoot holds ledger directories that outlive their test (a loaded Caddy config keeps
	// its ledger open until the next config replaces it).
	testRoot string
)

func TestMain(m *testing.M) {
	p := freeport.MustPick(3)
	caddyAdminPort, caddyHTTPPort, caddyHTTPSPort = p[0], p[1], p[2]
	caddyBase = fmt.Sprintf("http://127.0.0.1:%d", caddyHTTPPort)
	var err error
	if testRoot, err = os.MkdirTemp("", "textgen-account-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := pgtest.Run(m) // stops the PostgreSQL server, if a test started it
	_ = caddy.Stop()
	if stripeSrv != nil {
		stripeSrv.Stop()
	}
	if ollamaSrv != nil {
		ollamaSrv.Stop()
	}
	os.RemoveAll(testRoot)
	os.Exit(code)
}

// realStripeMock starts the pinned stripe-mock once for the package (building it if needed).
// It never skips: without it the test fails, naming the command that installs it.
func realStripeMock(t testing.TB) *stripemocktest.Server {
	t.Helper()
	tier.Full(t, "stripe-mock")
	stripeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		stripeSrv, stripeErr = stripemocktest.Start(ctx)
	})
	if stripeErr != nil {
		t.Fatalf("starting stripe-mock (go install github.com/stripe/stripe-mock@%s): %v", stripemocktest.Version, stripeErr)
	}
	return stripeSrv
}

func realOllama(t testing.TB) *ollamatest.Server {
	t.Helper()
	tier.Full(t, "the real Ollama")
	ollamaOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		ollamaSrv, ollamaErr = ollamatest.Start(ctx, ollamatest.Options{NumPredict: 12})
	})
	if ollamaErr != nil {
		t.Fatalf("starting the real Ollama: %v", ollamaErr)
	}
	return ollamaSrv
}

// stripeRecorder sits in front of stripe-mock and remembers every Checkout Session created
// through it (the form the client sent and the id stripe-mock gave it): stripe-mock keeps no
// state, and its answer's payment URL is a fixed fixture, so this is how a test learns which
// session a browser is paying for.
type stripeRecorder struct {
	target string
	srv    *httptest.Server

	mu       sync.Mutex
	sessions []recordedSession
}

type recordedSession struct {
	Form url.Values
	ID   string
	URL  string
}

func newStripeRecorder(t testing.TB, target string) *stripeRecorder {
	rec := &stripeRecorder{target: target}
	rec.srv = httptest.NewServer(rec)
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *stripeRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	relayStripe(w, r, rec.target, func(body []byte, res *http.Response, out []byte) []byte {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/checkout/sessions" && res.StatusCode == 200 {
			form, _ := url.ParseQuery(string(body))
			var cs struct{ ID, URL string }
			json.Unmarshal(out, &cs)
			rec.mu.Lock()
			rec.sessions = append(rec.sessions, recordedSession{Form: form, ID: cs.ID, URL: cs.URL})
			rec.mu.Unlock()
		}
		return out
	})
}

// relayStripe passes r on to stripe-mock at target and its answer back, through seen: what the
// test proxy notes of the request body and the answer, and the answer body it sends instead.
func relayStripe(w http.ResponseWriter, r *http.Request, target string, seen func(body []byte, res *http.Response, out []byte) []byte) {
	body, _ := io.ReadAll(r.Body)
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	out = seen(body, res, out)
	for k, v := range res.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(res.StatusCode)
	w.Write(out)
}

func (rec *stripeRecorder) created() []recordedSession {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]recordedSession(nil), rec.sessions...)
}
