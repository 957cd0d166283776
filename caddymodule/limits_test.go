package caddymodule

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
	"github.com/caddy-textgen/textgen/caddymodule/internal/redistest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// The rate limits run on limitNow; the tests move it forward instead of sleeping. It only ever
// moves forward, so the buckets of earlier tests stay consistent.
var clockOffset atomic.Int64

func init() {
	limitNow = func() time.Time { return time.Now().Add(time.Duration(clockOffset.Load())) }
}

func advanceClock(d time.Duration) { clockOffset.Add(int64(d)) }

// fastBackend is a fault server that answers every request at once with "tok tok tok " (the
// limits are the subject of these tests, not the model), plus the models stall (one piece,
// then nothing until the client leaves) and fast (like the default).
func fastBackend(t *testing.T) *ollamatest.FaultServer {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	fs.Set(ollamatest.FaultConfig{Model: "stall", Mode: ollamatest.FaultStall, Pieces: 1, Piece: "first "})
	return fs
}

// stallTool routes email-writer to the stalling model.
const stallTool = "tool email-writer {\n\t\t\tmodel stall\n\t\t}"

func (e *env) get(path, key string) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, baseURL+path, nil)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// generateOK posts a summarizer request and expects the whole text.
func (e *env) generateOK(key string) *http.Response {
	e.t.Helper()
	resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		e.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "tok tok tok " {
		e.t.Fatalf("status %d body %q, want 200 and the text", resp.StatusCode, body)
	}
	return resp
}

// expect429 posts a summarizer request and expects a 429 with code, returning Retry-After.
func (e *env) expect429(key, tool, code string) (*http.Response, int) {
	e.t.Helper()
	resp, err := e.post(context.Background(), key, genBody(tool, "x", "en", ""))
	if err != nil {
		e.t.Fatal(err)
	}
	b := decodeErr(e.t.(*testing.T), resp)
	if resp.StatusCode != 429 || b.Error.Code != code {
		e.t.Fatalf("status %d code %q (%s), want 429 %s", resp.StatusCode, b.Error.Code, b.Error.Message, code)
	}
	if resp.Header.Get("X-Credits-Used") != "0" || resp.Header.Get("Content-Type") != "application/json" {
		e.t.Errorf("429 headers %v", resp.Header)
	}
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 1 {
		e.t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	return resp, ra
}

// holds counts the account's hold entries: a refused request must not have reserved anything.
func (e *env) holds(acctID string) int { return e.count(acctID, ledger.KindHold) }

var rateLimitRe = regexp.MustCompile(`^"([a-z/-]+)";r=(\d+);t=(\d+)$`)

// parseRateLimit splits a RateLimit field into its items: name -> (r, t).
func parseRateLimitField(t *testing.T, v string) map[string][2]int {
	t.Helper()
	out := map[string][2]int{}
	for _, item := range strings.Split(v, ", ") {
		m := rateLimitRe.FindStringSubmatch(item)
		if m == nil {
			t.Fatalf("RateLimit item %q does not match the draft's syntax", item)
		}
		r, _ := strconv.Atoi(m[2])
		tt, _ := strconv.Atoi(m[3])
		out[m[1]] = [2]int{r, tt}
	}
	return out
}

func TestRateLimitPerKey(t *testing.T) {
	fs := fastBackend(t)
	e := newEnv(t, envOptions{ollama: fs.URL, limits: "rate_limit key 2/20m\n\t\trate_limit account off"})
	acct, key := e.account(10)
	otherKey, _, err := e.store.CreateKey(context.Background(), acct.ID, ledger.Live, "second", time.Time{})
	if err != nil {
		t.Fatal(err)
	}

	for i, wantR := range []int{1, 0} {
		resp := e.generateOK(key)
		if p := resp.Header.Get("RateLimit-Policy"); p != `"key";q=2;w=1200` {
			t.Errorf("request %d: RateLimit-Policy %q", i, p)
		}
		rl := parseRateLimitField(t, resp.Header.Get("RateLimit"))
		if got := rl["key"]; got[0] != wantR || got[1] < 1 || got[1] > 600 {
			t.Errorf("request %d: RateLimit %q, want r=%d and t within one token's 600 s", i, resp.Header.Get("RateLimit"), wantR)
		}
	}
	resp, retry := e.expect429(key, "summarizer", "rate_limited")
	if retry > 600 {
		t.Errorf("Retry-After %d: the next token is at most 600 s away", retry)
	}
	if p := resp.Header.Get("RateLimit-Policy"); p != `"key";q=2;w=1200` {
		t.Errorf("429 RateLimit-Policy %q", p)
	}
	if rl := parseRateLimitField(t, resp.Header.Get("RateLimit")); rl["key"] != [2]int{0, retry} {
		t.Errorf("429 RateLimit %q, want r=0;t=%d (the Retry-After)", resp.Header.Get("RateLimit"), retry)
	}
	if resp.Header.Get("X-Credits-Remaining") != "8" {
		t.Errorf("X-Credits-Remaining %q on the 429", resp.Header.Get("X-Credits-Remaining"))
	}
	// Never charged, never held.
	if b := e.balance(acct.ID); b.Balance != 8 || b.Available != 8 || e.holds(acct.ID) != 2 {
		t.Errorf("balance %+v with %d holds, want 8 and 2 holds", b, e.holds(acct.ID))
	}
	// The limit is per key: the account's other key still works.
	e.generateOK(otherKey)

	// One token comes back after 10 minutes, the whole burst after the window. (The windows
	// are long so that the real time the test takes never restores a token.)
	advanceClock(11 * time.Minute)
	e.generateOK(key)
	e.expect429(key, "summarizer", "rate_limited")
	advanceClock(21 * time.Minute)
	e.generateOK(key)
	e.generateOK(key)
	e.expect429(key, "summarizer", "rate_limited")
	if b := e.balance(acct.ID); b.Balance != 10-6 {
		t.Errorf("balance %+v, want 4 (6 requests served)", b)
	}
	e.verify()
}

func TestRateLimitPerAccountAndTool(t *testing.T) {
	fs := fastBackend(t)
	e := newEnv(t, envOptions{ollama: fs.URL,
		limits: "rate_limit key 100/1h burst 50\n\t\trate_limit account 3/1h",
		extra:  "tool summarizer {\n\t\t\trate_limit key 1/1h\n\t\t}"})
	acct, key1 := e.account(10)
	key2, _, err := e.store.CreateKey(context.Background(), acct.ID, ledger.Live, "second", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	_, otherAcctKey := e.account(10)

	// The tool's own limit adds to the handler-wide ones, and shows in the headers.
	resp := e.generateOK(key1)
	if p := resp.Header.Get("RateLimit-Policy"); p != `"key";q=100;w=3600;textgen-burst=50, "account";q=3;w=3600, "key/summarizer";q=1;w=3600` {
		t.Errorf("RateLimit-Policy %q", p)
	}
	rl := parseRateLimitField(t, resp.Header.Get("RateLimit"))
	if rl["key"][0] != 49 || rl["account"][0] != 2 || rl["key/summarizer"][0] != 0 {
		t.Errorf("RateLimit %q", resp.Header.Get("RateLimit"))
	}
	resp, _ = e.expect429(key1, "summarizer", "rate_limited")
	if p := resp.Header.Get("RateLimit-Policy"); p != `"key/summarizer";q=1;w=3600` {
		t.Errorf("the refusing policy is the tool's: %q", p)
	}
	// Another tool is not under the summarizer's limit. The account limit (3) counts the
	// requests of both keys: key1's first (its second, refused by the tool's limit, used up
	// none of the others), then key2's two; key2's third is one too many.
	okOther := func(key string) {
		t.Helper()
		resp, err := e.post(context.Background(), key, genBody("email-writer", "x", "en", ""))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("email-writer: %d", resp.StatusCode)
		}
	}
	okOther(key2)
	okOther(key2)
	resp, _ = e.expect429(key2, "email-writer", "rate_limited")
	if p := resp.Header.Get("RateLimit-Policy"); p != `"account";q=3;w=3600` {
		t.Errorf("the refusing policy is the account's: %q", p)
	}
	// Other accounts are not affected.
	okOther(otherAcctKey)
	if b := e.balance(acct.ID); b.Balance != 7 || e.holds(acct.ID) != 3 {
		t.Errorf("balance %+v, %d holds; want 7 and 3", b, e.holds(acct.ID))
	}
	e.verify()
}

func TestAuthFailureLimit(t *testing.T) {
	fs := fastBackend(t)
	e := newEnv(t, envOptions{ollama: fs.URL, limits: "auth_failure_limit 3/1h"})
	acct, key := e.account(5)
	post := func(k string) *http.Response {
		t.Helper()
		resp, err := e.post(context.Background(), k, genBody("summarizer", "x", "en", ""))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// A missing key is no guess: it does not count.
	for i := 0; i < 5; i++ {
		if b := decodeErr(t, post("")); b.Error.Code != "missing_api_key" {
			t.Fatalf("no key: %s", b.Error.Code)
		}
	}
	bogus := []string{"tg_live_guess", key[:len(key)-1] + flip(key[len(key)-1]), "hello"}
	for _, k := range bogus {
		if b := decodeErr(t, post(k)); b.Error.Code != "invalid_api_key" {
			t.Fatalf("bogus key: %s", b.Error.Code)
		}
	}
	// Over the limit even a valid key is refused before it is looked up.
	resp, retry := e.expect429(key, "summarizer", "rate_limited")
	if retry > 1200 {
		t.Errorf("Retry-After %d; a failure is restored every 1200 s", retry)
	}
	if p := resp.Header.Get("RateLimit-Policy"); p != `"auth-failures";q=3;w=3600` {
		t.Errorf("RateLimit-Policy %q", p)
	}
	if rl := parseRateLimitField(t, resp.Header.Get("RateLimit")); rl["auth-failures"] != [2]int{0, retry} {
		t.Errorf("RateLimit %q", resp.Header.Get("RateLimit"))
	}
	if v := resp.Header.Values("X-Credits-Remaining"); len(v) != 0 {
		t.Errorf("X-Credits-Remaining %v before the key was checked", v)
	}
	// The balance endpoint is behind the same gate.
	bresp := e.get("/api/v1/balance", key)
	if b := decodeErr(t, bresp); bresp.StatusCode != 429 || b.Error.Code != "rate_limited" {
		t.Errorf("balance: %d %s", bresp.StatusCode, b.Error.Code)
	}
	if e.holds(acct.ID) != 0 {
		t.Errorf("a refused request held a credit")
	}

	advanceClock(21 * time.Minute) // one failure restored
	e.generateOK(key)              // a success costs no failure
	e.generateOK(key)
	if b := decodeErr(t, post("tg_live_guess")); b.Error.Code != "invalid_api_key" {
		t.Fatalf("after the wait a guess is looked up again: %s", b.Error.Code)
	}
	e.expect429(key, "summarizer", "rate_limited")
	if b := e.balance(acct.ID); b.Balance != 3 {
		t.Errorf("balance %+v", b)
	}
}

// TestRateLimitSurvivesReload: a reload that keeps a limit keeps its counts (a reload cannot
// reset them); a changed limit starts afresh; the old config's limiter state is released.
func TestRateLimitSurvivesReload(t *testing.T) {
	fs := fastBackend(t)
	opts := envOptions{ollama: fs.URL, limits: "rate_limit key 2/1h\n\t\tmax_concurrent_per_account 3"}
	e := newEnv(t, opts)
	_, key := e.account(10)
	e.generateOK(key)
	e.generateOK(key)
	e.expect429(key, "summarizer", "rate_limited")

	opts.dir = e.dir
	opts.extra = "max_input_chars 999"
	newEnv(t, opts)
	// The replaced server closes its idle connections while it stops; a POST (which the client
	// does not retry) on one of them would see EOF.
	e.client.CloseIdleConnections()
	resp, err := e.post(context.Background(), key, genBody("summarizer", strings.Repeat("x", 1000), "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	if b := decodeErr(t, resp); resp.StatusCode != 429 {
		t.Fatalf("after a reload that kept the limit: %d %s, want 429", resp.StatusCode, b.Error.Code)
	}
	e.expect429(key, "summarizer", "rate_limited")

	opts.limits = "rate_limit key 3/1h\n\t\tmax_concurrent_per_account 3"
	newEnv(t, opts)
	e.client.CloseIdleConnections()
	e.generateOK(key)

	abs := mustAbs(t, e.dir)
	var keys []string
	limiterPool.Range(func(k, _ any) bool {
		if s := k.(string); strings.HasPrefix(s, abs+"|") {
			keys = append(keys, s)
		}
		return true
	})
	want := []string{abs + "|key|3/3600000000000/3", abs + "|account|120/60000000000/120", abs + "|auth|30/60000000000/30"}
	if len(keys) != len(want) {
		t.Errorf("limiter state held for this ledger: %q, want %q (the replaced config's released)", keys, want)
	}
	for _, k := range want {
		if refs, ok := limiterPool.References(k); !ok || refs != 1 {
			t.Errorf("%s: %d references (%v), want 1", k, refs, ok)
		}
	}
	if refs, ok := slotPool.References(abs + "|0s"); !ok || refs != 1 {
		t.Errorf("account slots: %d references, want 1", refs)
	}
}

// TestConcurrencyCapPerAccount: an account at its cap gets 429 too_many_concurrent_requests
// before anything is reserved; its places come back on every exit path.
func TestConcurrencyCapPerAccount(t *testing.T) {
	fs := fastBackend(t)
	// The streams stall after their first piece: once their clients leave they end by the idle
	// timeout (charged: text was delivered), kept short here.
	e := newEnv(t, envOptions{ollama: fs.URL, limits: "max_concurrent_per_account 2", extra: stallTool, idle: "3s"})
	acct, key := e.account(10)
	_, otherKey := e.account(10)

	var cancels []context.CancelFunc
	for i := 0; i < 2; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		resp, err := e.post(ctx, key, genBody("email-writer", "x", "en", ""))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buf := make([]byte, 3)
		if _, err := io.ReadFull(resp.Body, buf); err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream %d: %d %v", i, resp.StatusCode, err)
		}
	}
	resp, retry := e.expect429(key, "summarizer", "too_many_concurrent_requests")
	if retry != 1 {
		t.Errorf("Retry-After %d", retry)
	}
	if p, r := resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"); p != `"concurrency";q=2;qu="concurrent-requests"` || r != `"concurrency";r=0` {
		t.Errorf("RateLimit-Policy %q, RateLimit %q", p, r)
	}
	if resp.Header.Get("X-Credits-Remaining") != "8" {
		t.Errorf("X-Credits-Remaining %q: two holds are open", resp.Header.Get("X-Credits-Remaining"))
	}
	// Two holds (in memory at once; on disk a moment later), none for the refused request.
	if b := e.balance(acct.ID); b.Balance != 10 || b.Available != 8 {
		t.Errorf("balance %+v: the refused request must not have reserved", b)
	}
	e.generateOK(otherKey) // the cap is per account

	// The clients leave after text was delivered: both are charged, their places free.
	for _, c := range cancels {
		c()
	}
	waitFor(t, "both streams to settle", func() bool { return e.balance(acct.ID).Balance == 8 })
	waitFor(t, "the places to come back", func() bool {
		return e.running(acct.ID) == 0
	})
	e.generateOK(key)
	if n := e.holds(acct.ID); n != 3 {
		t.Errorf("%d holds, want 3: the refused request reserved", n)
	}

	// Places come back on error exits too: 402s one after another with a cap of 2.
	broke, brokeKey := e.account(0)
	for i := 0; i < 4; i++ {
		resp, err := e.post(context.Background(), brokeKey, genBody("summarizer", "x", "en", ""))
		if err != nil {
			t.Fatal(err)
		}
		if b := decodeErr(t, resp); resp.StatusCode != 402 {
			t.Fatalf("request %d: %d %s, want 402", i, resp.StatusCode, b.Error.Code)
		}
	}
	if e.running(broke.ID) != 0 || len(e.entries(broke.ID)) != 0 {
		t.Errorf("the 402s left places taken or wrote to the ledger")
	}
	e.verify()
}

// running is the number of places the account holds right now.
func (e *env) running(acctID string) int {
	abs := mustAbs(e.t, e.dir)
	var slots *ratelimit.Slots
	slotPool.Range(func(k, v any) bool {
		if strings.HasPrefix(k.(string), abs+"|") {
			slots = v.(pooledSlots).Slots
		}
		return true
	})
	if slots == nil {
		e.t.Fatalf("no account slots for this ledger")
	}
	return slots.Running(context.Background(), acctID)
}

// counterValue reads a counter of the package's metrics.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// serversOf returns the pooled model servers that talk to url.
func serversOf(t *testing.T, url string) backends.ModelServers {
	t.Helper()
	var s backends.ModelServers
	for k, v := range textgenapp.OpenServers() {
		if strings.Contains(k, url) {
			s = v
		}
	}
	if s == nil {
		t.Fatalf("no model servers for %s", url)
	}
	return s
}

// TestAdmissionQueue: with every host at max_in_flight, requests wait in the bounded queue; a
// full queue and a wait past queue_timeout get 503 overloaded without a hold; a freed place
// goes to the waiting request.
func TestAdmissionQueue(t *testing.T) {
	fs := fastBackend(t)
	// Retention off: the place must free when the stalled stream's client leaves (with retention
	// a generation that delivered text keeps its place until it ends).
	e := newEnv(t, envOptions{ollama: fs.URL, limits: "max_in_flight 1\n\t\tqueue_size 1\n\t\tqueue_timeout 500ms", extra: stallTool + "\n\t\tretention off"})
	o := serversOf(t, fs.URL)
	full0 := counterValue(metrics.rejections.WithLabelValues("queue_full"))
	timeout0 := counterValue(metrics.rejections.WithLabelValues("queue_timeout"))
	a1, k1 := e.account(5)
	a2, k2 := e.account(5)
	a3, k3 := e.account(5)

	// k1 takes the only place with a stalled stream.
	ctx1, cancel1 := context.WithCancel(context.Background())
	resp1, err := e.post(ctx1, k1, genBody("email-writer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer resp1.Body.Close()
	if _, err := io.ReadFull(resp1.Body, make([]byte, 3)); err != nil {
		t.Fatal(err)
	}

	queued := func(key string) <-chan *http.Response {
		ch := make(chan *http.Response, 1)
		go func() {
			resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
			if err != nil {
				t.Error(err)
				close(ch)
				return
			}
			ch <- resp
		}()
		waitFor(t, "a request to queue", func() bool { return o.QueueLen() == 1 })
		return ch
	}
	overloaded := func(resp *http.Response, wantRetry string) {
		t.Helper()
		if resp == nil {
			t.Fatal("no response")
		}
		b := decodeErr(t, resp)
		if resp.StatusCode != 503 || b.Error.Code != "overloaded" || resp.Header.Get("Retry-After") != wantRetry ||
			resp.Header.Get("X-Credits-Used") != "0" || resp.Header.Get("X-Credits-Remaining") != "5" {
			t.Errorf("status %d code %s headers %v", resp.StatusCode, b.Error.Code, resp.Header)
		}
	}

	// k2 waits in the queue; k3 finds it full and is refused at once.
	ch2 := queued(k2)
	resp3, err := e.post(context.Background(), k3, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	overloaded(resp3, "2")
	// k2 gives up after the queue timeout.
	overloaded(<-ch2, "5")
	if e.holds(a2.ID) != 0 || e.holds(a3.ID) != 0 {
		t.Errorf("refused admissions reserved credit")
	}
	if d := counterValue(metrics.rejections.WithLabelValues("queue_full")) - full0; d != 1 {
		t.Errorf("queue_full rejections +%v", d)
	}
	if d := counterValue(metrics.rejections.WithLabelValues("queue_timeout")) - timeout0; d != 1 {
		t.Errorf("queue_timeout rejections +%v", d)
	}

	// A queued request gets the place when the stream ends.
	ch2 = queued(k2)
	cancel1()
	resp2 := <-ch2
	if resp2 == nil {
		t.Fatal("no response")
	}
	body, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if resp2.StatusCode != 200 || string(body) != "tok tok tok " {
		t.Fatalf("queued request: %d %q", resp2.StatusCode, body)
	}
	waitFor(t, "the streams to settle", func() bool {
		return e.balance(a1.ID).Balance == 4 && e.balance(a2.ID).Balance == 4
	})
	if b := e.balance(a3.ID); b.Balance != 5 || b.Available != 5 {
		t.Errorf("refused account: %+v", b)
	}
	e.verify()
}

// TestOllamaBusyIsOverloaded: Ollama's own 503 (its queue full) maps to 503 overloaded with
// Retry-After and no charge.
func TestOllamaBusyIsOverloaded(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultBusy})
	e := newEnv(t, envOptions{ollama: fs.URL, limits: "default"})
	acct, key := e.account(3)
	resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	b := decodeErr(t, resp)
	if resp.StatusCode != 503 || b.Error.Code != "overloaded" || resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Credits-Remaining") != "3" {
		t.Errorf("status %d code %s headers %v", resp.StatusCode, b.Error.Code, resp.Header)
	}
	if bal := e.balance(acct.ID); bal.Balance != 3 || bal.Available != 3 {
		t.Errorf("balance %+v", bal)
	}
	e.verify()
}

// TestBodyReadTimeout: a client that sends its body too slowly gets 408 request_timeout.
func TestBodyReadTimeout(t *testing.T) {
	fs := fastBackend(t)
	e := newEnv(t, envOptions{ollama: fs.URL, limits: "body_read_timeout 300ms"})
	acct, key := e.account(3)
	resp := slowBody(t, key)
	b := decodeErr(t, resp)
	if resp.StatusCode != 408 || b.Error.Code != "request_timeout" || resp.Header.Get("X-Credits-Remaining") != "3" {
		t.Errorf("status %d code %s headers %v", resp.StatusCode, b.Error.Code, resp.Header)
	}
	if len(e.entries(acct.ID)) != 1 { // the grant
		t.Errorf("the slow request wrote to the ledger")
	}
	// A normal request on a fresh connection is unaffected.
	e.generateOK(key)
}

func TestUnmarshalCaddyfileLimits(t *testing.T) {
	d := caddyfile.NewTestDispenser(`textgen {
		ledger /var/lib/textgen
		rate_limit key 60/1m burst 10
		rate_limit account 120/h
		auth_failure_limit off
		max_concurrent_per_account 2
		max_in_flight 4
		queue_size off
		queue_timeout 3s
		body_read_timeout 5s
		limits_store {env.TEXTGEN_REDIS_URL}
		slot_expiry 10s
		tool sql-generator {
			rate_limit key 10/1m
			rate_limit account 20/30s burst 5
		}
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if k := h.RateLimit.Key; k.Requests != 60 || time.Duration(k.Window) != time.Minute || k.Burst != 10 {
		t.Errorf("key limit %+v", k)
	}
	if a := h.RateLimit.Account; a.Requests != 120 || time.Duration(a.Window) != time.Hour || a.Burst != 0 {
		t.Errorf("account limit %+v", a)
	}
	if !h.AuthFailureLimit.Off || h.MaxConcurrentPerAccount != 2 || h.MaxInFlight != 4 || h.QueueSize != -1 ||
		time.Duration(h.QueueTimeout) != 3*time.Second || time.Duration(h.BodyReadTimeout) != 5*time.Second {
		t.Errorf("limits %+v", h)
	}
	if h.LimitsStore != "{env.TEXTGEN_REDIS_URL}" || time.Duration(h.SlotExpiry) != 10*time.Second {
		t.Errorf("limits_store %q, slot_expiry %v", h.LimitsStore, time.Duration(h.SlotExpiry))
	}
	sql := h.Tools["sql-generator"].RateLimit
	if sql.Key.Requests != 10 || sql.Account.Requests != 20 || time.Duration(sql.Account.Window) != 30*time.Second || sql.Account.Burst != 5 {
		t.Errorf("tool limits %+v %+v", sql.Key, sql.Account)
	}

	for input, want := range map[string]string{
		"textgen {\n rate_limit\n}":                                                  "wrong argument count",
		"textgen {\n rate_limit ip 1/1m\n}":                                          "neither key nor account",
		"textgen {\n rate_limit key 1/1m\n rate_limit key 2/1m\n}":                   "rate_limit key specified more than once",
		"textgen {\n rate_limit key many/1m\n}":                                      "not <requests>/<window>",
		"textgen {\n rate_limit key 0/1m\n}":                                         "not <requests>/<window>",
		"textgen {\n rate_limit key 5/10ms\n}":                                       "at least 1s",
		"textgen {\n rate_limit key 5/1m bust 3\n}":                                  "expected burst",
		"textgen {\n rate_limit key 5/1m burst\n}":                                   "wrong argument count",
		"textgen {\n auth_failure_limit 5\n}":                                        "not <requests>/<window>",
		"textgen {\n max_in_flight 0\n}":                                             "neither a whole number > 0 nor off",
		"textgen {\n queue_size lots\n}":                                             "neither a whole number > 0 nor off",
		"textgen {\n queue_timeout soon\n}":                                          "queue_timeout",
		"textgen {\n tool summarizer {\n rate_limit key off\n }\n}":                  "only allowed for the handler-wide",
		"textgen {\n max_concurrent_per_account 1\n max_concurrent_per_account 2\n}": "more than once",
		"textgen {\n limits_store\n}":                                                "wrong argument count",
		"textgen {\n slot_expiry soon\n}":                                            "slot_expiry",
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want error containing %q", input, err, want)
		}
	}
}

func TestValidateLimits(t *testing.T) {
	for name, h := range map[string]Handler{
		"zero requests":     {Ledger: "x", RateLimit: &RateLimits{Key: &RateLimit{Window: caddy.Duration(time.Minute)}}},
		"short window":      {Ledger: "x", AuthFailureLimit: &RateLimit{Requests: 1, Window: caddy.Duration(time.Millisecond)}},
		"negative burst":    {Ledger: "x", RateLimit: &RateLimits{Account: &RateLimit{Requests: 1, Burst: -1}}},
		"tool off":          {Ledger: "x", Tools: map[string]*ToolConfig{"summarizer": {RateLimit: &RateLimits{Key: &RateLimit{Off: true}}}}},
		"negative cap":      {Ledger: "x", MaxConcurrentPerAccount: -2},
		"negative queue":    {Ledger: "x", QueueSize: -5},
		"negative duration": {Ledger: "x", QueueTimeout: -1},
		"short slot expiry": {Ledger: "x", SlotExpiry: caddy.Duration(100 * time.Millisecond)},
	} {
		if err := h.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	h := Handler{Ledger: "x"}
	h.setDefaults()
	if err := h.Validate(); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
	if *h.RateLimit.Key != defaultKeyLimit || h.RateLimit.Account.Burst != 120 || h.AuthFailureLimit.Requests != 30 ||
		h.MaxConcurrentPerAccount != 4 || h.MaxInFlight != 8 || h.QueueSize != 32 ||
		time.Duration(h.QueueTimeout) != 10*time.Second || time.Duration(h.BodyReadTimeout) != 10*time.Second {
		t.Errorf("defaults %+v %+v", h, h.RateLimit)
	}
}

// BenchmarkLimitsPerRequest measures what the limits add to one generate request: the key and
// account buckets with their RateLimit headers, the account's concurrent place, and the
// request counter, over 10,000 keys of 1,000 accounts; in memory, and in a real redis-server.
func BenchmarkLimitsPerRequest(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchLimits(b, nil) })
	b.Run("redis", func(b *testing.B) {
		s, err := ratelimit.OpenShared(redistest.New(b).URL(0), ratelimit.SharedOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		benchLimits(b, s)
	})
}

func benchLimits(b *testing.B, s *ratelimit.Shared) {
	initMetrics()
	key := (&RateLimit{Requests: 1 << 30, Window: caddy.Duration(time.Minute)}).withDefaults()
	ps := []*policy{
		newPolicy("key", "rate_limit_key", "this API key", key, ratelimit.NewShared(s, "key", key.limit(), 0)),
		newPolicy("account", "rate_limit_account", "this account", key, ratelimit.NewShared(s, "account", key.limit(), 0)),
	}
	ps[1].byAccount = true
	slots := ratelimit.NewSlots(s, "accounts", 0)
	defer slots.Close()
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "key_" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		hdr := http.Header{}
		var states [2]limitState
		var got [2]ratelimit.State
		i := 0
		for pb.Next() {
			k, a := keys[i%len(keys)], "acct_"+strconv.Itoa(i%1000)
			i++
			reqs := [2]ratelimit.Request{{Buckets: ps[0].buckets, ID: k}, {Buckets: ps[1].buckets, ID: a}}
			if d, _ := ratelimit.TakeAll(ctx, limitNow(), reqs[:], got[:]); d >= 0 {
				b.Fatal("refused")
			}
			states[0], states[1] = limitState{ps[0], got[0]}, limitState{ps[1], got[1]}
			setRateHeaders(hdr, states[:])
			slot, ok := slots.Acquire(ctx, a, 4)
			if !ok {
				b.Fatal("no place")
			}
			slot.Release()
			metrics.requests.WithLabelValues("summarizer", "200").Inc()
		}
	})
	if s != nil && s.Fallbacks() != 0 {
		b.Fatalf("%d calls fell back to memory", s.Fallbacks())
	}
}
