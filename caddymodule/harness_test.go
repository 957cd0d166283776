package caddymodule

// The integration harness: the real Caddy runtime (caddytest, in this process), a real Badger
// ledger on disk, and the real Ollama v0.6.8 with the tiny generated model (ollamatest).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/caddy-textgen/textgen/caddymodule/internal/apitest"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/internal/freeport"
	"github.com/caddy-textgen/textgen/internal/tier"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// The in-process Caddy's ports, picked free when the test binary starts, so that two test runs
// (or anything else on the machine) never share one.
var (
	adminPort, httpPort, httpsPort int
	baseURL                        string
)

// testRoot holds the ledger directories. A config stays loaded after its test ends (until the
// next test loads another), so its ledger must outlive the test: the directories are removed
// only after Caddy has stopped.
var testRoot string

func TestMain(m *testing.M) {
	p := freeport.MustPick(3)
	adminPort, httpPort, httpsPort = p[0], p[1], p[2]
	baseURL = fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	var err error
	if testRoot, err = os.MkdirTemp("", "textgen-caddymodule-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Caddy's data directory (where the in-process Caddy keeps the retention key it makes) is the
	// test run's own, never the user's.
	os.Setenv("XDG_DATA_HOME", filepath.Join(testRoot, "xdg-data"))
	code := pgtest.Run(m) // stops the PostgreSQL server, if a test started it
	_ = caddy.Stop()
	for _, o := range []*sharedOllama{mainOllama, soloOllamaSrv} {
		if o.srv != nil {
			_ = o.srv.Stop()
		}
	}
	_ = os.RemoveAll(testRoot)
	os.Exit(code)
}

// ledgerDir returns a fresh directory for a ledger that outlives the test.
func ledgerDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(testRoot, "ledger-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// sharedOllama is a real Ollama that the package's tests share: started once, by the first test
// that asks, with numParallel generations at a time. It never skips: a test that needs Ollama
// fails when it cannot run.
type sharedOllama struct {
	numParallel int
	once        sync.Once
	srv         *ollamatest.Server
	err         error
}

// ollamas are the package's real Ollama servers, stopped by TestMain.
var (
	// mainOllama runs four generations at once: the tests of the handler's own rules.
	mainOllama = &sharedOllama{numParallel: 4}
	// soloOllama runs one at a time, for the tests that send every tool's long instructions
	// (about 1,700 tokens each) and inputs that fill the tiny model's window. Ollama keeps each of
	// its parallel slots' tokens in one cache for reuse, and llama.cpp attends over the cache up
	// to its highest cell in use; four slots of long prompts leave that mark near 4 x 8,192
	// cells, and every later request, short or long, then costs up to twenty times the CPU. On a
	// server of its own with one slot, the mark stays at the longest prompt, and the shared
	// server's requests stay cheap.
	soloOllamaSrv = &sharedOllama{numParallel: 1}
)

func (o *sharedOllama) get(t testing.TB) *ollamatest.Server {
	t.Helper()
	tier.Full(t, "the real Ollama")
	o.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		o.srv, o.err = ollamatest.Start(ctx, ollamatest.Options{NumPredict: 24, NumParallel: o.numParallel})
	})
	if o.err != nil {
		t.Fatalf("starting the real Ollama: %v", o.err)
	}
	return o.srv
}

// realOllama is the package's real Ollama of four slots (mainOllama).
func realOllama(t testing.TB) *ollamatest.Server { return mainOllama.get(t) }

// soloOllama is the package's real Ollama of one slot (soloOllamaSrv).
func soloOllama(t testing.TB) *ollamatest.Server { return soloOllamaSrv.get(t) }

// modelServer is the model server of the tests of the handler's own rules: the real Ollama in the
// full tier; in the fast tier (-short) the in-process fault server (a fake Ollama), streaming 24
// pieces 2 ms apart, so that those rules are checked without the real one.
func modelServer(t *testing.T) string {
	t.Helper()
	if !testing.Short() {
		return realOllama(t).URL
	}
	return ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 24, Delay: 2 * time.Millisecond,
		Window: ollamatest.TinyWindow}).URL
}

// env is one loaded Caddy config with its ledger.
type env struct {
	t      testing.TB
	dir    string
	store  ledger.Store
	client *http.Client
}

type envOptions struct {
	ollama string // base URL of the model server
	wire   string // how the handler speaks to it: "ollama" (default) or "openai" (and api_key)
	model  string // default "tiny"
	encode bool   // put encode in front of the handler
	extra  string // more textgen subdirectives
	dir    string // ledger directory; default a fresh one
	// limits are the limit subdirectives; "" sets them all so high that the tests of other
	// behaviour (50 requests at once from one key, 20 streams across a reload) cannot trip over
	// them while their code still runs; "default" leaves the defaults.
	limits string
	site   string // more directives of the site block (before textgen)
	// matcher is textgen's matcher; default /api/*.
	matcher string
	// settings, when set, are the textgen block's settings after ledger, server and model,
	// instead of the test defaults (temperature, first_piece_timeout, limits, extra): a
	// configuration as a user writes it, such as the example Caddyfile's (exampleSettings).
	settings string
	global   string // more global options
	// firstPiece is first_piece_timeout. Default 10m: the tiny model evaluates the long
	// built-in prompts at a few ms a token, several at once and on a loaded machine much
	// slower, so tests allow it far more than the 60s default (the tests of the timeout set
	// their own).
	firstPiece string
	// idle is idle_timeout. Default 10m: twenty streams at once of the tiny model on a busy
	// 2-core machine can pause for more than the 30s default between two pieces.
	idle string
}

// highLimits are on, but out of reach of any test.
const highLimits = `rate_limit key 1000000/1m
		rate_limit account 1000000/1m
		auth_failure_limit 1000000/1m
		max_concurrent_per_account 1000
		max_in_flight 1000
		queue_size 1000`

func caddyfileFor(o envOptions, dir string) string {
	model := o.model
	if model == "" {
		model = ollamatest.DefaultModel
	}
	enc := ""
	if o.encode {
		enc = "encode gzip"
	}
	wire := o.wire
	if wire == "" {
		wire = "ollama"
	}
	firstPiece := o.firstPiece
	if firstPiece == "" {
		firstPiece = "10m"
	}
	idle := o.idle
	if idle == "" {
		idle = "10m"
	}
	matcher := o.matcher
	if matcher == "" {
		matcher = "/api/*"
	}
	limits := o.limits
	switch limits {
	case "":
		limits = highLimits
	case "default":
		limits = ""
	}
	settings := o.settings
	if settings == "" {
		settings = fmt.Sprintf(`# The tiny test model has random weights: at a low temperature it repeats one token, and
		# Ollama cuts a stream after 30 repeats (without its done line). Sampling avoids that.
		temperature 1
		first_piece_timeout %s
		idle_timeout %s
		%s
		%s`, firstPiece, idle, limits, o.extra)
	}
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 30s
	skip_install_trust
	%s
}
http://127.0.0.1:%d {
	%s
	%s
	textgen %s {
		ledger %s
		%s %s
		model %s
		%s
	}
	respond "not the api" 404
}
`, adminPort, httpPort, httpsPort, o.global, httpPort, o.site, enc, matcher, dir, wire, o.ollama, model, settings)
}

// loadConfig adapts a Caddyfile and loads it into the in-process Caddy, as its admin endpoint's
// /load does (caddytest would skip in the fast tier: the handler's rules are tested there too).
func loadConfig(t *testing.T, caddyfile string) {
	t.Helper()
	cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting the Caddyfile: %v\n%s", err, caddyfile)
	}
	for _, w := range warnings {
		if !strings.Contains(w.Message, "not formatted") { // the tests' Caddyfiles are indented for Go
			t.Logf("Caddyfile: %s", w.String())
		}
	}
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading the config: %v\n%s", err, caddyfile)
	}
}

// newEnv loads a config into the in-process Caddy and returns its ledger.
func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	dir := o.dir
	if dir == "" {
		dir = ledgerDir(t)
	}
	loadConfig(t, caddyfileFor(o, dir))
	abs, _ := filepath.Abs(dir)
	store := textgenapp.OpenLedgers()[abs]
	if store == nil {
		t.Fatalf("ledger %s is not open after loading the config", abs)
	}
	return &env{t: t, dir: dir, store: store,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
}

// account creates an account with a live key and credits live credits, and returns both.
func (e *env) account(credits int64) (ledger.Account, string) {
	e.t.Helper()
	ctx := context.Background()
	acct, err := e.store.CreateAccount(ctx, fmt.Sprintf("user-%d@example.com", time.Now().UnixNano()))
	if err != nil {
		e.t.Fatal(err)
	}
	key, _, err := e.store.CreateKey(ctx, acct.ID, ledger.Live, "test", time.Time{})
	if err != nil {
		e.t.Fatal(err)
	}
	if credits > 0 {
		e.grant(acct.ID, ledger.Live, credits)
	}
	return acct, key
}

// disabledAccount is account(credits) disabled by the operator.
func (e *env) disabledAccount(credits int64) (ledger.Account, string) {
	e.t.Helper()
	acct, key := e.account(credits)
	if _, err := e.store.SetAccountStatus(context.Background(), acct.ID, ledger.StatusDisabled); err != nil {
		e.t.Fatal(err)
	}
	return acct, key
}

func (e *env) grant(acctID string, mode ledger.Mode, credits int64) {
	e.t.Helper()
	_, err := e.store.Grant(context.Background(), ledger.GrantRequest{
		AccountID: acctID, Mode: mode, Kind: ledger.KindGrant, Credits: credits,
		Reference: fmt.Sprintf("test-%d", time.Now().UnixNano()),
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) balance(acctID string) ledger.Balance {
	e.t.Helper()
	b, err := e.store.Balance(context.Background(), acctID)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// entries returns the account's whole history, oldest first.
func (e *env) entries(acctID string) []ledger.Entry {
	e.t.Helper()
	var all []ledger.Entry
	p := ledger.Page{Limit: 1000}
	for {
		page, next, err := e.store.History(context.Background(), acctID, p)
		if err != nil {
			e.t.Fatal(err)
		}
		all = append(all, page...)
		if next == "" {
			break
		}
		p.Cursor = next
	}
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return all
}

// count is the number of the account's entries of kind.
func (e *env) count(acctID string, kind ledger.EntryKind) int {
	e.t.Helper()
	n := 0
	for _, en := range e.entries(acctID) {
		if en.Kind == kind {
			n++
		}
	}
	return n
}

func (e *env) verify() {
	e.t.Helper()
	rep, err := e.store.Verify(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	if !rep.OK {
		e.t.Fatalf("ledger verify: %+v", rep.Problems)
	}
}

func genBody(tool, input, lang, tone string) string {
	m := map[string]string{"tool": tool, "input": input, "language": lang}
	if tone != "" {
		m["tone"] = tone
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// post sends a generate request.
func (e *env) post(ctx context.Context, key, body string, hdr ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/api/v1/generate", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.client.Do(req)
}

// chunk is one read of a streamed body.
type chunk struct {
	at   time.Time
	data string
}

// readChunks reads a body as it arrives, one record per Read that returned data.
func readChunks(r io.Reader) ([]chunk, error) {
	var out []chunk
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			out = append(out, chunk{at: time.Now(), data: string(buf[:n])})
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

func joinChunks(cs []chunk) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.data)
	}
	return b.String()
}

// apiErr decodes an error answer.
type apiErrBody = apitest.ErrBody

func decodeErr(t *testing.T, resp *http.Response) apiErrBody { return apitest.DecodeErr(t, resp) }

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	name, data string
}

func readSSE(r io.Reader) ([]sseEvent, error) {
	evs, err := apitest.ReadSSE(r)
	out := make([]sseEvent, len(evs))
	for i, e := range evs {
		out[i] = sseEvent{name: e.Name, data: e.Data}
	}
	return out, err
}

// deadURL returns the URL of a loopback port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

var _ = bytes.NewReader

func mustAbs(t testing.TB, dir string) string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// slowBody sends a generate request whose body stops after its first bytes: 408 after
// body_read_timeout.
func slowBody(t *testing.T, key string) *http.Response {
	t.Helper()
	return slowBodyAt(t, "/api/v1/generate", key)
}

// slowBodyAt is slowBody for the POST endpoint at path.
func slowBodyAt(t *testing.T, path, key string) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second)) // only so a failing test cannot hang
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-API-Key: %s\r\nContent-Length: 100\r\n\r\n{\"tool\":", path, key)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
