package caddymodule

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// TestReloadUnderLoad changes the Caddyfile (as `caddy reload` does, through the admin API's
// /load) while 20 streams from the real Ollama are running: every stream completes, the ledger
// stays open (it is shared through the pool, never reopened) and verifies clean.
func TestReloadUnderLoad(t *testing.T) {
	realOllama(t)
	o := ollamatest.StartT(t, ollamatest.Options{NumParallel: 20, NumPredict: 120})
	// The tiny model evaluates prompts slowly (about 3 ms a token on one thread): a short
	// prompt file (an operator override) keeps 20 parallel prompts well inside the timeouts.
	prompt := filepath.Join(testRoot, "short-summarizer.md")
	if err := os.WriteFile(prompt, []byte("description: short test prompt\n---\nSummarize."), 0o644); err != nil {
		t.Fatal(err)
	}
	tools := "max_output_tokens 120\ntool summarizer {\nprompt_file " + prompt + "\n}"
	opts := envOptions{ollama: o.URL, model: o.Model, extra: tools}
	e := newEnv(t, opts)
	acct, key := e.account(40)

	const streams = 20
	var started, wg sync.WaitGroup
	started.Add(streams)
	type result struct {
		status         int
		text           string
		err            error
		firstAt, endAt time.Time
	}
	results := make([]result, streams)
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, err := e.post(context.Background(), key, genBody("summarizer", "Tell a long story.", "en", ""))
			if err != nil {
				results[i].err = err
				started.Done()
				return
			}
			defer resp.Body.Close()
			results[i].status = resp.StatusCode
			buf := make([]byte, 1)
			_, err = io.ReadFull(resp.Body, buf)
			results[i].firstAt = time.Now()
			started.Done()
			if err != nil {
				results[i].err = err
				return
			}
			rest, err := io.ReadAll(resp.Body)
			results[i].text = string(buf) + string(rest)
			results[i].err = err
			results[i].endAt = time.Now()
		}(i)
	}
	started.Wait() // every stream has sent text

	// The reload: same ledger, a changed setting.
	reloadAt := time.Now()
	opts2 := opts
	opts2.dir = e.dir
	opts2.extra = tools + "\nmax_input_chars 999"
	tester := caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{AdminPort: adminPort, LoadRequestTimeout: 30 * time.Second})
	tester.InitServer(caddyfileFor(opts2, e.dir), "caddyfile")
	if t.Failed() {
		t.Fatal("reload failed")
	}
	reloadDone := time.Now()
	wg.Wait()

	overlapped := 0
	for i, r := range results {
		if r.err != nil || r.status != 200 {
			t.Errorf("stream %d: status %d err %v", i, r.status, r.err)
			continue
		}
		if r.endAt.After(reloadDone) && r.firstAt.Before(reloadAt) {
			overlapped++
		}
	}
	if t.Failed() {
		t.Logf("Ollama log:\n%s", o.LogTail(40))
	}
	if overlapped == 0 {
		t.Fatalf("no stream ran across the reload; the test proves nothing")
	}
	t.Logf("%d of %d streams ran across the reload", overlapped, streams)

	// The new config is live (its new limit answers) and uses the same open ledger. The
	// replaced server closes its idle connections as it stops; a POST (which the client does
	// not retry) on one of them could see EOF.
	e.client.CloseIdleConnections()
	resp, err := e.post(context.Background(), key, genBody("summarizer", strings.Repeat("x", 1000), "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	if b := decodeErr(t, resp); resp.StatusCode != 413 || b.Error.Code != "input_too_large" {
		t.Errorf("new limit not in force: %d %s", resp.StatusCode, b.Error.Code)
	}
	if store := textgenapp.OpenLedgers()[mustAbs(t, e.dir)]; store != e.store {
		t.Errorf("the ledger was reopened by the reload")
	}
	b := e.balance(acct.ID)
	if b.Balance != 40-streams || b.Available != b.Balance {
		t.Errorf("balance %+v, want %d", b, 40-streams)
	}
	e.verify()
}

// TestTestKeys: test keys never call the model, draw on the test balance and get 402 there.
func TestTestKeys(t *testing.T) {
	e := newEnv(t, envOptions{ollama: deadURL(t)}) // no model server at all
	ctx := context.Background()
	acct, liveKey := e.account(5)
	testKey, k, err := e.store.CreateKey(ctx, acct.ID, ledger.Test, "ci", time.Time{})
	if err != nil || k.Mode != ledger.Test || !strings.HasPrefix(testKey, "tg_test_") {
		t.Fatalf("test key %q %+v %v", k.Prefix, k, err)
	}
	e.grant(acct.ID, ledger.Test, 2)
	for i := 0; i < 2; i++ {
		resp, err := e.post(ctx, testKey, genBody("sql-generator", "all users", "en", ""))
		if err != nil {
			t.Fatal(err)
		}
		text, _ := checkStreamed(t, resp, []string{"1", "0"}[i])
		if !strings.Contains(strings.ToLower(text), "test") {
			t.Errorf("the sample text is not marked as a test: %q", text)
		}
	}
	resp, err := e.post(ctx, testKey, genBody("sql-generator", "all users", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 402 || decodeErr(t, resp).Error.Code != "insufficient_credits" {
		t.Errorf("test key without test credits: %d", resp.StatusCode)
	}
	b := e.balance(acct.ID)
	if b.Balance != 5 || b.TestBalance != 0 {
		t.Errorf("balance %+v: test requests must not touch live credits", b)
	}
	// The live key, with no model server, gets 503 and keeps its credits.
	resp, _ = e.post(ctx, liveKey, genBody("sql-generator", "all users", "en", ""))
	if resp.StatusCode != 503 {
		t.Errorf("live key without model server: %d", resp.StatusCode)
	}
	resp.Body.Close()
	e.verify()
}

func TestIdempotencyKey(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 4, Piece: "ok "})
	// Without retention (retention off), the replay behaviour this test pins; retention_test.go has
	// the replays of kept text.
	e := newEnv(t, envOptions{ollama: fs.URL, extra: "retention off"})
	acct, key := e.account(5)
	ctx := context.Background()
	body := genBody("summarizer", "text", "en", "")

	resp, err := e.post(ctx, key, body, "Idempotency-Key", "order-1")
	if err != nil {
		t.Fatal(err)
	}
	first := resp.Header.Get("X-Request-Id")
	if text, _ := checkStreamed(t, resp, "4"); text != "ok ok ok ok " {
		t.Fatalf("text %q", text)
	}
	// The retry is not generated or charged again, and reports the first status.
	resp, err = e.post(ctx, key, body, "Idempotency-Key", "order-1")
	if err != nil {
		t.Fatal(err)
	}
	var replay struct {
		Replay    bool   `json:"idempotent_replay"`
		RequestID string `json:"request_id"`
		Status    int    `json:"status"`
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "true" || resp.Header.Get("X-Credits-Used") != "0" ||
		json.Unmarshal(data, &replay) != nil || !replay.Replay || replay.RequestID != first || replay.Status != 200 {
		t.Errorf("replay: %d %v %s", resp.StatusCode, resp.Header, data)
	}
	if fs.Requests() != 1 {
		t.Errorf("the model was called %d times", fs.Requests())
	}
	// The same key with another body is refused.
	resp, _ = e.post(ctx, key, genBody("summarizer", "other", "en", ""), "Idempotency-Key", "order-1")
	if resp.StatusCode != 422 || decodeErr(t, resp).Error.Code != "idempotency_key_reused" {
		t.Errorf("reuse with another body: %d", resp.StatusCode)
	}
	// A first attempt that failed (and cost nothing) does not hold its key: the retry runs.
	fs.Set(ollamatest.FaultConfig{Mode: ollamatest.FaultBusy})
	resp, _ = e.post(ctx, key, body, "Idempotency-Key", "order-2")
	if resp.StatusCode != 503 {
		t.Errorf("busy: %d", resp.StatusCode)
	}
	resp.Body.Close()
	fs.Set(ollamatest.FaultConfig{Pieces: 2, Piece: "ok "})
	resp, _ = e.post(ctx, key, body, "Idempotency-Key", "order-2")
	checkStreamed(t, resp, "3")
	if b := e.balance(acct.ID); b.Balance != 3 {
		t.Errorf("balance %+v, want 3 (two charged requests)", b)
	}
	// A retry while the first attempt still streams is told to wait, and costs nothing.
	fs.Set(ollamatest.FaultConfig{Pieces: 50, Piece: "slow ", Delay: 10 * time.Millisecond})
	running, err := e.post(ctx, key, body, "Idempotency-Key", "order-3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(running.Body, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	resp, _ = e.post(ctx, key, body, "Idempotency-Key", "order-3")
	if resp.StatusCode != 409 || resp.Header.Get("Retry-After") != "1" || decodeErr(t, resp).Error.Code != "idempotency_in_progress" {
		t.Errorf("retry during the first attempt: %d %v", resp.StatusCode, resp.Header)
	}
	if rest, err := io.ReadAll(running.Body); err != nil || !strings.HasSuffix(string(rest), "slow ") {
		t.Errorf("the first attempt: %v %q", err, rest)
	}
	running.Body.Close()
	if b := e.balance(acct.ID); b.Balance != 2 {
		t.Errorf("balance %+v, want 2 (the retry during the first attempt charged nothing)", b)
	}

	// Test and live requests have separate keys: a live request that reuses a key first sent
	// with a test key is generated and charged, not answered with the test request's result.
	testKey, _, err := e.store.CreateKey(ctx, acct.ID, ledger.Test, "test", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	e.grant(acct.ID, ledger.Test, 2)
	fs.Set(ollamatest.FaultConfig{Pieces: 2, Piece: "live "})
	calls := fs.Requests()
	resp, _ = e.post(ctx, testKey, body, "Idempotency-Key", "shared-1")
	if sample, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || !strings.Contains(string(sample), "test mode") {
		t.Errorf("test request: %d %q", resp.StatusCode, sample)
	}
	resp.Body.Close()
	resp, _ = e.post(ctx, key, body, "Idempotency-Key", "shared-1")
	if text, _ := checkStreamed(t, resp, "1"); text != "live live " || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("live request with a key a test request used: %q %v, want the live text", text, resp.Header)
	}
	if fs.Requests() != calls+1 {
		t.Errorf("the model was called %d times for the live request, want once", fs.Requests()-calls)
	}
	e.verify()
}

func TestToolsAndBalanceEndpoints(t *testing.T) {
	e := newEnv(t, envOptions{ollama: deadURL(t)})
	acct, key := e.account(7)
	resp, err := http.Get(baseURL + "/api/v1/tools")
	if err != nil {
		t.Fatal(err)
	}
	var doc toolsDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(doc.Tools) != 27 || doc.Tools[0].Slug != "email-writer" || doc.Tools[26].Slug != "pdf-filler" ||
		len(doc.Tones) != 4 || len(doc.Languages) < 30 {
		t.Errorf("catalog: %d tools, %d tones, %d languages", len(doc.Tools), len(doc.Tones), len(doc.Languages))
	}
	for _, tool := range doc.Tools {
		if tool.Name == "" || tool.Description == "" || tool.MaxInputChars != 20000 {
			t.Errorf("tool %+v", tool)
		}
	}
	req, _ := http.NewRequest("GET", baseURL+"/api/v1/balance", nil)
	req.Header.Set("X-API-Key", key)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var bal balanceDoc
	_ = json.NewDecoder(resp.Body).Decode(&bal)
	resp.Body.Close()
	if resp.StatusCode != 200 || bal.Available != 7 || bal.AccountID != acct.ID || bal.Mode != "live" || resp.Header.Get("X-Credits-Remaining") != "7" {
		t.Errorf("balance: %d %+v", resp.StatusCode, bal)
	}
}
