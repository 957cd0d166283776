package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

var requestIDRe = regexp.MustCompile(`^req_[0-9A-Za-z]{22}$`)

// checkStreamed asserts a successful streamed answer and returns its text.
func checkStreamed(t *testing.T, resp *http.Response, remaining string) (string, []chunk) {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	h := resp.Header
	if ct := h.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if h.Get("X-Credits-Used") != "1" || h.Get("X-Credits-Remaining") != remaining {
		t.Errorf("credit headers: used %q remaining %q, want 1 and %s", h.Get("X-Credits-Used"), h.Get("X-Credits-Remaining"), remaining)
	}
	if !requestIDRe.MatchString(h.Get("X-Request-Id")) {
		t.Errorf("X-Request-Id %q", h.Get("X-Request-Id"))
	}
	if h.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", h.Get("Cache-Control"))
	}
	if resp.ContentLength != -1 || h.Get("Content-Length") != "" {
		t.Errorf("a stream must have no Content-Length, got %d", resp.ContentLength)
	}
	chunks, err := readChunks(resp.Body)
	if err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	return joinChunks(chunks), chunks
}

// assertPiecesOverTime checks that the text came in several reads spread over time, not in
// one piece at the end.
func assertPiecesOverTime(t *testing.T, chunks []chunk) {
	t.Helper()
	if len(chunks) < 3 {
		t.Fatalf("the text arrived in %d reads; want it piece by piece", len(chunks))
	}
	distinct := map[time.Time]bool{}
	for _, c := range chunks {
		distinct[c.at] = true
	}
	if len(distinct) < 3 || !chunks[0].at.Before(chunks[len(chunks)-1].at) {
		t.Fatalf("pieces did not arrive over time: %d reads at %d distinct times", len(chunks), len(distinct))
	}
}

func TestGenerateStreamsAndSettles(t *testing.T) {
	ollama := modelServer(t)
	for _, encode := range []bool{false, true} {
		name := "plain"
		if encode {
			name = "behind encode"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envOptions{ollama: ollama, encode: encode})
			acct, key := e.account(3)
			resp, err := e.post(context.Background(), key, genBody("email-writer", "Ask my landlord to fix the heating.", "en", "friendly"))
			if err != nil {
				t.Fatal(err)
			}
			if encode && !resp.Uncompressed {
				t.Errorf("behind encode the response should be gzip-compressed (and still stream)")
			}
			reqID := resp.Header.Get("X-Request-Id")
			text, chunks := checkStreamed(t, resp, "2")
			if strings.TrimSpace(text) == "" {
				t.Fatal("empty text")
			}
			assertPiecesOverTime(t, chunks)

			b := e.balance(acct.ID)
			if b.Balance != 2 || b.Available != 2 {
				t.Errorf("balance after one request: %+v, want 2/2", b)
			}
			var settles, holds int
			for _, en := range e.entries(acct.ID) {
				switch en.Kind {
				case ledger.KindSettle:
					settles++
					if en.RequestID != reqID || en.Tool != "email-writer" || en.Amount != -1 {
						t.Errorf("settle entry %+v", en)
					}
				case ledger.KindHold:
					holds++
				case ledger.KindVoid:
					t.Errorf("unexpected void %+v", en)
				}
			}
			if settles != 1 || holds != 1 {
				t.Errorf("%d settles, %d holds; want one of each", settles, holds)
			}
			e.verify()
		})
	}
}

func TestGenerateSSE(t *testing.T) {
	ollama := modelServer(t)
	e := newEnv(t, envOptions{ollama: ollama})
	acct, key := e.account(2)
	resp, err := e.post(context.Background(), key, genBody("summarizer", "Caddy is a web server.", "de", ""), "Accept", "text/event-stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Credits-Remaining") != "1" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	events, err := readSSE(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) < 3 {
		t.Fatalf("%d events", len(events))
	}
	for _, ev := range events[:len(events)-1] {
		var d struct{ Text *string }
		if ev.name != "delta" || json.Unmarshal([]byte(ev.data), &d) != nil || d.Text == nil {
			t.Fatalf("bad delta event %+v", ev)
		}
	}
	last := events[len(events)-1]
	var done doneEvent
	if last.name != "done" || json.Unmarshal([]byte(last.data), &done) != nil {
		t.Fatalf("last event %+v", last)
	}
	if done.CreditsUsed != 1 || done.CreditsRemaining != 1 || done.RequestID != resp.Header.Get("X-Request-Id") || done.OutputTokens <= 0 {
		t.Errorf("done event %+v", done)
	}
	if b := e.balance(acct.ID); b.Balance != 1 {
		t.Errorf("balance %+v", b)
	}
}

// TestGenerateClientErrors sends every error a client can cause and checks the answer and
// that nothing was charged or even held.
func TestGenerateClientErrors(t *testing.T) {
	ollama := modelServer(t)
	e := newEnv(t, envOptions{ollama: ollama, extra: "max_input_chars 100\nmax_body_size 2KiB\nlanguages de en tr pt"})
	ctx := context.Background()
	acct, key := e.account(5)
	broke, brokeKey := e.account(0)
	_, disabledKey := e.disabledAccount(5)
	_, revokedKey := e.account(0)
	rk, _ := e.store.ListKeys(ctx, mustAccountOf(t, e, revokedKey))
	if _, err := e.store.RevokeKey(ctx, rk[0].AccountID, rk[0].ID); err != nil {
		t.Fatal(err)
	}
	expiredAcct, _ := e.account(5)
	// A key may not be created already expired: make one that expires at once, and wait until
	// the clock has passed its expiry (the ledger's and this test's clock are the same).
	expiredKey, k, err := e.store.CreateKey(ctx, expiredAcct.ID, ledger.Live, "short", time.Now().Add(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for !time.Now().After(k.Expires) {
		time.Sleep(5 * time.Millisecond)
	}
	// A well-formed key with a valid checksum that this ledger does not know.
	other, err := badgerledger.Open("", badgerledger.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	oa, _ := other.CreateAccount(ctx, "x@example.com")
	unknownKey, _, _ := other.CreateKey(ctx, oa.ID, ledger.Live, "x", time.Time{})
	other.Close()

	good := genBody("summarizer", "text", "en", "")
	long := genBody("summarizer", strings.Repeat("ü", 101), "en", "")
	cases := []struct {
		name      string
		method    string
		path      string
		key       string
		ctype     string
		body      string
		status    int
		code      string
		param     string
		remaining string // "" means the header must be absent
	}{
		{"GET on generate", "GET", "/api/v1/generate", key, "", "", 405, "method_not_allowed", "", ""},
		{"no key", "POST", "", "", "", good, 401, "missing_api_key", "", ""},
		{"garbage key", "POST", "", "hello", "", good, 401, "invalid_api_key", "", ""},
		{"bad checksum", "POST", "", key[:len(key)-1] + flip(key[len(key)-1]), "", good, 401, "invalid_api_key", "", ""},
		{"unknown key", "POST", "", unknownKey, "", good, 401, "invalid_api_key", "", ""},
		{"revoked key", "POST", "", revokedKey, "", good, 401, "invalid_api_key", "", ""},
		{"expired key", "POST", "", expiredKey, "", good, 401, "key_expired", "", ""},
		{"disabled account", "POST", "", disabledKey, "", good, 403, "account_disabled", "", "5"},
		{"form body", "POST", "", key, "application/x-www-form-urlencoded", "tool=x", 415, "unsupported_media_type", "", "5"},
		{"not json", "POST", "", key, "", "{nope", 400, "invalid_json", "", "5"},
		{"array", "POST", "", key, "", "[1]", 400, "invalid_json", "", "5"},
		{"trailing", "POST", "", key, "", good + "{}", 400, "invalid_json", "", "5"},
		{"unknown field", "POST", "", key, "", `{"tool":"summarizer","input":"x","language":"en","model":"big"}`, 400, "unknown_field", "model", "5"},
		{"duplicate field", "POST", "", key, "", `{"tool":"summarizer","input":"x","input":"y","language":"en"}`, 400, "invalid_field", "input", "5"},
		{"wrong type", "POST", "", key, "", `{"tool":"summarizer","input":7,"language":"en"}`, 400, "invalid_field", "input", "5"},
		{"missing tool", "POST", "", key, "", `{"input":"x","language":"en"}`, 400, "missing_field", "tool", "5"},
		{"missing language", "POST", "", key, "", `{"tool":"summarizer","input":"x"}`, 400, "missing_field", "language", "5"},
		{"blank input", "POST", "", key, "", genBody("summarizer", " \n\t ", "en", ""), 400, "empty_input", "input", "5"},
		{"invalid utf-8", "POST", "", key, "", "{\"tool\":\"summarizer\",\"input\":\"\xc3\x28\",\"language\":\"en\"}", 400, "invalid_utf8", "input", "5"},
		{"NUL input", "POST", "", key, "", `{"tool":"summarizer","input":"\u0000","language":"en"}`, 400, "invalid_field", "input", "5"},
		{"zero-width input", "POST", "", key, "", `{"tool":"summarizer","input":"\u200b\u200b\ufeff","language":"en"}`, 400, "empty_input", "input", "5"},
		{"lone surrogate", "POST", "", key, "", `{"tool":"summarizer","input":"\ud800","language":"en"}`, 400, "invalid_utf8", "input", "5"},
		{"unknown tool", "POST", "", key, "", genBody("poem-writer", "x", "en", ""), 400, "unknown_tool", "tool", "5"},
		{"unsupported language", "POST", "", key, "", genBody("summarizer", "x", "ja", ""), 400, "unsupported_language", "language", "5"},
		{"garbage language", "POST", "", key, "", genBody("summarizer", "x", "!!", ""), 400, "unsupported_language", "language", "5"},
		{"bad tone", "POST", "", key, "", genBody("summarizer", "x", "en", "angry"), 400, "invalid_tone", "tone", "5"},
		{"input too large", "POST", "", key, "", long, 413, "input_too_large", "input", "5"},
		{"body too large", "POST", "", key, "", genBody("summarizer", strings.Repeat("a", 3000), "en", ""), 413, "body_too_large", "", "5"},
		{"no credits", "POST", "", brokeKey, "", good, 402, "insufficient_credits", "", "0"},
		{"unknown path", "GET", "/api/v1/nothing", key, "", "", 404, "not_found", "", ""},
		{"POST on tools", "POST", "/api/v1/tools", key, "", "", 405, "method_not_allowed", "", ""},
		{"balance without key", "GET", "/api/v1/balance", "", "", "", 401, "missing_api_key", "", ""},
	}
	before := len(e.entries(acct.ID))
	conf := newConformance(t, e.client)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.path
			if path == "" {
				path = "/api/v1/generate"
			}
			req, _ := http.NewRequest(c.method, baseURL+path, strings.NewReader(c.body))
			ct := c.ctype
			if ct == "" {
				ct = "application/json"
			}
			req.Header.Set("Content-Type", ct)
			if c.key != "" {
				req.Header.Set("X-API-Key", c.key)
			}
			resp, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			conf.check(req, resp) // the answer docs/openapi.json documents
			if resp.StatusCode != c.status {
				t.Errorf("status %d, want %d", resp.StatusCode, c.status)
			}
			h := resp.Header
			if h.Get("Content-Type") != "application/json" || h.Get("X-Credits-Used") != "0" || !requestIDRe.MatchString(h.Get("X-Request-Id")) {
				t.Errorf("headers %v", h)
			}
			if got, present := h.Get("X-Credits-Remaining"), len(h.Values("X-Credits-Remaining")) > 0; got != c.remaining || (c.remaining == "" && present) {
				t.Errorf("X-Credits-Remaining %q, want %q", got, c.remaining)
			}
			if c.status == 405 && h.Get("Allow") == "" {
				t.Errorf("405 without Allow")
			}
			b := decodeErr(t, resp)
			if b.Error.Code != c.code || b.Error.Param != c.param || b.Error.Message == "" || b.Error.RequestID != h.Get("X-Request-Id") {
				t.Errorf("body %+v, want code %s param %q", b.Error, c.code, c.param)
			}
			// Without buy_url and without My Account in the config, the 402 says whom to ask
			// (account/browser_test.go checks that it names the account area when there is one).
			if c.code == "insufficient_credits" && !strings.Contains(b.Error.Message, "ask the operator of this service") {
				t.Errorf("the 402 message %q does not say to ask the operator", b.Error.Message)
			}
			if c.key == key && strings.Contains(b.Error.Message, key) {
				t.Errorf("the error message echoes the key")
			}
		})
	}
	if b := e.balance(acct.ID); b.Balance != 5 || b.Available != 5 {
		t.Errorf("balance changed by client errors: %+v", b)
	}
	if after := len(e.entries(acct.ID)); after != before {
		t.Errorf("client errors wrote %d ledger entries", after-before)
	}
	if b := e.balance(broke.ID); b.Balance != 0 || len(e.entries(broke.ID)) != 0 {
		t.Errorf("the 402 wrote to the ledger: %+v", b)
	}
	e.verify()
}

func flip(c byte) string {
	if c == 'a' {
		return "b"
	}
	return "a"
}

func mustAccountOf(t *testing.T, e *env, key string) string {
	t.Helper()
	k, _, err := e.store.LookupKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return k.AccountID
}

// TestGenerateConcurrentSmallBalance: 50 simultaneous requests against 5 credits.
func TestGenerateConcurrentSmallBalance(t *testing.T) {
	ollama := modelServer(t)
	e := newEnv(t, envOptions{ollama: ollama})
	acct, key := e.account(5)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	start := make(chan struct{})
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := e.post(context.Background(), key, genBody("summarizer", "Count to three.", "en", ""))
			if err != nil {
				t.Error(err)
				return
			}
			_, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr != nil {
				t.Errorf("reading: %v", rerr)
			}
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	if codes[200] != 5 || codes[402] != 45 {
		t.Fatalf("status counts %v, want 5×200 and 45×402", codes)
	}
	if b := e.balance(acct.ID); b.Available != 0 || b.Balance != 0 {
		t.Errorf("balance %+v, want 0", b)
	}
	e.verify()
}

// TestGenerateBackendDown: a stopped model server gives 503 and no charge.
func TestGenerateBackendDown(t *testing.T) {
	e := newEnv(t, envOptions{ollama: deadURL(t), extra: "connect_timeout 2s"})
	acct, key := e.account(3)
	resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Credits-Used") != "0" || resp.Header.Get("X-Credits-Remaining") != "3" {
		t.Errorf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	if b := decodeErr(t, resp); b.Error.Code != "backend_unavailable" {
		t.Errorf("code %q", b.Error.Code)
	}
	if b := e.balance(acct.ID); b.Balance != 3 || b.Available != 3 {
		t.Errorf("balance %+v", b)
	}
	e.verify()
}

// The faults below cannot be produced by the real Ollama on demand, so they use the
// fault-injecting fake server of ollamatest.

func TestGenerateStallGives504(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall})
	e := newEnv(t, envOptions{ollama: fs.URL, firstPiece: "300ms"})
	acct, key := e.account(2)
	resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 504 || resp.Header.Get("X-Credits-Used") != "0" || resp.Header.Get("X-Credits-Remaining") != "2" {
		t.Errorf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	if b := decodeErr(t, resp); b.Error.Code != "backend_timeout" {
		t.Errorf("code %q", b.Error.Code)
	}
	if b := e.balance(acct.ID); b.Balance != 2 || b.Available != 2 {
		t.Errorf("balance %+v", b)
	}
	e.verify()
}

func TestGenerateErrorAfterPiecesAborts(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultErrorAfter, Pieces: 3, Piece: "word "})
	e := newEnv(t, envOptions{ollama: fs.URL})
	acct, key := e.account(2)

	resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("the truncated stream ended cleanly (err %v, body %q): a client could take it for complete", err, data)
	}
	if !strings.HasPrefix(string(data), "word word") {
		t.Errorf("body %q", data)
	}
	if b := e.balance(acct.ID); b.Balance != 2 || b.Available != 2 {
		t.Errorf("balance %+v: the credit was not returned", b)
	}
	var voids int
	for _, en := range e.entries(acct.ID) {
		if en.Kind == ledger.KindVoid {
			voids++
		}
		if en.Kind == ledger.KindSettle {
			t.Errorf("settled an aborted generation")
		}
	}
	if voids != 1 {
		t.Errorf("%d voids", voids)
	}

	// SSE: the same failure ends with an error event.
	resp, err = e.post(context.Background(), key, genBody("summarizer", "x", "en", ""), "Accept", "text/event-stream")
	if err != nil {
		t.Fatal(err)
	}
	events, _ := readSSE(resp.Body)
	resp.Body.Close()
	if len(events) != 4 || events[3].name != "error" || !strings.Contains(events[3].data, "backend_error") {
		t.Errorf("SSE events %+v", events)
	} else if want := `"request_id":"` + resp.Header.Get("X-Request-Id") + `"`; !strings.HasPrefix(want, `"request_id":"req_`) || !strings.Contains(events[3].data, want) {
		t.Errorf("SSE error event %s, want the request's id (%s) as every error has it", events[3].data, want)
	}
	if b := e.balance(acct.ID); b.Balance != 2 || b.Available != 2 {
		t.Errorf("balance %+v after the SSE failure: the credit was not returned", b)
	}
	if voids := e.count(acct.ID, ledger.KindVoid); voids != 2 {
		t.Errorf("%d voids after both failures, want 2", voids)
	}
	e.verify()
}

// TestGenerateClientDisconnect: a client that leaves mid-stream stops the generation on the
// model server, and is charged because text was delivered.
func TestGenerateClientDisconnect(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 1000, Piece: "slow ", Delay: 20 * time.Millisecond})
	// With retention on (the default) the generation would run on for its followers
	// (retention_test.go); off, the client's leaving stops it.
	e := newEnv(t, envOptions{ollama: fs.URL, extra: "retention off"})
	acct, key := e.account(2)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := e.post(ctx, key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	// Two pieces: the second is written only once the first was delivered. Leaving right after
	// the first is the documented instant that may go uncharged (the first flush sees the
	// client gone), which a loaded machine hits.
	buf := make([]byte, 2*len("slow "))
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the model server to see the client go", func() bool { return fs.ClientGone() == 1 && fs.InFlight() == 0 })
	waitFor(t, "the charge to settle", func() bool { return e.balance(acct.ID).Balance == 1 })
	if b := e.balance(acct.ID); b.Available != 1 {
		t.Errorf("balance %+v", b)
	}
	e.verify()
}

// TestGenerateDisconnectRealOllama: against the real Ollama, a client that leaves mid-stream
// makes the plugin close its connection to Ollama at once (Ollama's signal to stop generating),
// and is charged because text was delivered. A relay in front of Ollama counts the connections
// the plugin's side closed: a generation left running would keep its connection busy, and one
// that ended by itself would leave it open for reuse. (Whether the next request is served soon
// does not tell: the tiny random model's generations end and free their slot at random times.)
func TestGenerateDisconnectRealOllama(t *testing.T) {
	o := realOllama(t)
	relay, err := ollamatest.NewRelay(o.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relay.Close)
	// Retention off: with it on, the generation would run on (TestRetentionCutStreamRealOllama).
	// 1,000 tokens run on long past the 200 bytes read below (a token is at least a byte) and
	// leave every tool's instructions, by their bytes, room in the tiny model's window: an answer
	// so long that they do not (6,000) makes the handler ask the model server for the tokens of
	// every tool's instructions as it starts, one at a time, and this request waits behind them.
	e := newEnv(t, envOptions{ollama: relay.URL, extra: "max_output_tokens 1000\n\t\tretention off"})
	acct, key := e.account(3)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := e.post(ctx, key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	// Well past the first piece: a client that leaves within microseconds of its first piece may
	// go uncharged (docs/API.md, "Where charging is not exact"); this one has had many flushes.
	buf := make([]byte, 200)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	before := relay.ClientClosed()
	cancel()
	resp.Body.Close()
	waitFor(t, "the plugin to close its connection to Ollama", func() bool { return relay.ClientClosed() > before })
	waitFor(t, "the charge to settle", func() bool { return e.balance(acct.ID).Balance == 2 })
	if b := e.balance(acct.ID); b.Available != 2 {
		t.Errorf("balance %+v", b)
	}
	e.verify()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
