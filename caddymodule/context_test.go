package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/catalog"
	"github.com/caddy-textgen/textgen/ledger"
)

// The model's context against the real Ollama v0.6.8 and the tiny model, whose GGUF declares a
// window of ollamatest.TinyWindow tokens and whose tokenizer is byte-level (about a token a
// character), so that the limits are easy to reach.

// exampleSettings are the settings of the textgen block of the example Caddyfile (the one
// `./xcaddy.sh dev` runs), without its ledger, model server and model, which a test sets.
func exampleSettings(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	start := strings.Index(text, "\n\ttextgen @textgen {\n")
	if start < 0 {
		t.Fatal("the example Caddyfile has no textgen @textgen block")
	}
	start++
	block := text[start:]
	block = block[strings.Index(block, "\n")+1 : strings.Index(block, "\n\t}\n")]
	var keep []string
	for _, line := range strings.Split(block, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "ledger", "ollama", "openai", "model":
		default:
			keep = append(keep, strings.TrimSpace(line))
		}
	}
	if len(keep) == 0 {
		t.Fatal("no settings in the example's textgen block")
	}
	return strings.Join(keep, "\n\t\t")
}

// patientSettings are the example's settings with its time limits raised far beyond any machine's
// speed: the tests that run every tool through the real tiny model on the CPU are about what the
// tools and their limits do, and a busy or slow machine (the tiny model takes from seconds to
// minutes before the first piece of a long prompt, four at once) must not turn them into tests of
// its speed. The time limits themselves are tested against the fault model server.
func patientSettings(t *testing.T) string {
	t.Helper()
	s := exampleSettings(t)
	for _, name := range []string{"first_piece_timeout", "generation_timeout"} {
		if !strings.Contains(s, name+" ") {
			t.Fatalf("the example Caddyfile no longer sets %s; update this test", name)
		}
	}
	var lines []string
	for _, line := range strings.Split(s, "\n\t\t") {
		switch strings.Fields(line)[0] {
		case "first_piece_timeout":
			line = "first_piece_timeout 20m"
		case "generation_timeout":
			line = "generation_timeout 30m"
		}
		lines = append(lines, line)
	}
	lines = append(lines, "idle_timeout 10m") // the example leaves it at its 30s default
	return strings.Join(lines, "\n\t\t")
}

// prose is n bytes of plain ASCII text.
func prose(n int) string {
	const words = "The tenant shall pay the rent on the first day of each month and give notice in writing. "
	return strings.Repeat(words, n/len(words)+1)[:n]
}

// generateSSE sends a generate request for SSE and returns its status, events and error body.
// Refused by a limit (429: the account's place of a generation whose stream the caller has
// read to its end may not be given back yet), it sends it again until it is admitted, polling
// rather than waiting Retry-After's whole second; still refused after a minute, it returns the
// 429.
func generateSSE(t *testing.T, e *env, key, body string) (int, []sseEvent, apiErrBody) {
	t.Helper()
	resp, err := e.post(context.Background(), key, body, "Accept", "text/event-stream")
	for deadline := time.Now().Add(time.Minute); err == nil && resp.StatusCode == 429 && time.Now().Before(deadline); {
		resp.Body.Close()
		time.Sleep(20 * time.Millisecond)
		resp, err = e.post(context.Background(), key, body, "Accept", "text/event-stream")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.StatusCode, nil, decodeErr(t, resp)
	}
	events, err := readSSE(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, events, apiErrBody{}
}

// lastEvent decodes the stream's last event: done or error.
func lastEvent(t *testing.T, events []sseEvent) (string, doneEvent, apiErrBody) {
	t.Helper()
	if len(events) == 0 {
		t.Fatal("no events")
	}
	last := events[len(events)-1]
	var done doneEvent
	var eb apiErrBody
	var err error
	switch last.name {
	case "done":
		err = json.Unmarshal([]byte(last.data), &done)
	case "error":
		err = json.Unmarshal([]byte(last.data), &eb)
	}
	if err != nil {
		t.Fatalf("last event %+v: %v", last, err)
	}
	return last.name, done, eb
}

// Dev mode is the product in small: every one of the 27 tools answers 200 with the example
// Caddyfile's settings (the tools' own instructions and temperatures) and the tiny model, a
// complete answer that is charged once. The answers are capped at 64 tokens: the test is about
// every tool answering and being charged once, and the tools' own budgets of up to 1,024 tokens
// took the tiny model minutes on a 2-core machine (how a budget fits the window is
// TestLongestInputsFitOrAreRefused's).
func TestEveryToolAnswersInDevMode(t *testing.T) {
	o := soloOllama(t)
	e := newEnv(t, envOptions{ollama: o.URL, settings: patientSettings(t) + "\n\t\tmax_output_tokens 64"})
	slugs := catalog.Default().Slugs()
	acct, key := e.account(int64(len(slugs)))
	// One after another: the model server runs one at a time (soloOllama).
	for _, slug := range slugs {
		code, events, eb := generateSSE(t, e, key, genBody(slug, "Please help me with the heating of my flat, it has been cold for a week.", "de", "friendly"))
		if code != 200 {
			t.Errorf("%s: status %d %+v", slug, code, eb)
			continue
		}
		name, done, ev := lastEvent(t, events)
		if name != "done" || done.CreditsUsed != 1 || done.FinishReason == "" || done.OutputTokens <= 0 {
			t.Errorf("%s: last event %s %+v %+v", slug, name, done, ev)
		}
	}
	if b := e.balance(acct.ID); b.Balance != 0 || b.Available != 0 {
		t.Errorf("balance after %d tools: %+v, want 0", len(slugs), b)
	}
	e.verify()
}

// The largest input the example Caddyfile accepts (max_input_chars) does not fit the tiny model's
// window with any tool: the catalog states each tool's lower limit, and a longer input is
// refused 413 at the door with that number, free, and never reaches the model. An input at the
// limit is served whole, with no "truncating input prompt" in Ollama's log, and charged; one
// character more is refused.
func TestLongestInputsFitOrAreRefused(t *testing.T) {
	o := soloOllama(t)
	e := newEnv(t, envOptions{ollama: o.URL, settings: patientSettings(t)})
	acct, key := e.account(10)
	cutsBefore := o.LogCount("truncating input prompt")
	maxInput := 20000 // max_input_chars in the example
	if !strings.Contains(exampleSettings(t), "max_input_chars 20000") {
		t.Fatal("the example Caddyfile's max_input_chars changed; update this test")
	}
	limits := map[string]int{}
	for _, slug := range catalog.Default().Slugs() {
		limits[slug] = catalogLimit(t, e, slug)
		code, _, eb := generateSSE(t, e, key, genBody(slug, prose(maxInput), "en", ""))
		if code != 413 || eb.Error.Code != "input_too_large" || eb.Error.Param != "input" || statedLimit(t, eb) != limits[slug] {
			t.Fatalf("%s with %d characters (the catalog states %d): %d %+v", slug, maxInput, limits[slug], code, eb)
		}
	}
	if n := e.count(acct.ID, ledger.KindHold); n != 0 {
		t.Fatalf("%d holds for refused inputs", n)
	}

	// At the limit: the tool with the longest answer and a tool with the default one.
	for _, slug := range []string{"vertrag-erklaerer", "summarizer"} {
		limit := limits[slug]
		if limit < 1000 || limit >= maxInput {
			t.Fatalf("%s: a limit of %d characters", slug, limit)
		}
		code, _, eb := generateSSE(t, e, key, genBody(slug, prose(limit+1), "en", ""))
		if code != 413 || eb.Error.Code != "input_too_large" || statedLimit(t, eb) != limit {
			t.Errorf("%s, one character over the limit: %d %+v", slug, code, eb)
		}
		code, events, eb := generateSSE(t, e, key, genBody(slug, prose(limit), "en", ""))
		if code != 200 {
			t.Fatalf("%s at its limit of %d characters: %d %+v", slug, limit, code, eb)
		}
		name, done, ev := lastEvent(t, events)
		if name != "done" || done.CreditsUsed != 1 || done.FinishReason != "length" {
			t.Errorf("%s at its limit: last event %s %+v %+v", slug, name, done, ev)
		}
		// The receipt says the same.
		r, doc := e.getText(key, "/api/v1/generations/"+done.RequestID)
		var rc receipt
		if r.StatusCode != 200 || json.Unmarshal([]byte(doc), &rc) != nil || rc.FinishReason != "length" || rc.State != "completed" {
			t.Errorf("%s: receipt %d %s", slug, r.StatusCode, doc)
		}
	}
	if n := o.LogCount("truncating input prompt") - cutsBefore; n != 0 {
		t.Errorf("Ollama cut %d prompts", n)
	}
	if b := e.balance(acct.ID); b.Balance != 8 {
		t.Errorf("balance %+v, want 8 (two served)", b)
	}
	e.verify()
}

// A server that runs the model with a smaller context than the plugin was told (the model's
// num_ctx forced small in its Modelfile, over the OpenAI-compatible wire, which cannot set it)
// cuts the prompt without a word: Ollama drops the system prompt and answers the input alone.
// The answer's prompt count gives it away; the generation is not charged, the client gets an
// error instead of a done event, and the metric counts it.
func TestServerCutPromptIsNotCharged(t *testing.T) {
	o := realOllama(t)
	const model = "tinyctx"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := o.CreateModelWithContext(ctx, model, 24, 2300); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{ollama: o.URL + "/v1", wire: "openai", model: model,
		extra: "context " + model + " " + strconv.Itoa(ollamatest.TinyWindow)})
	acct, key := e.account(5)
	cutBefore := counterValue(metrics.contextRefusals.WithLabelValues("summarizer", "cut"))

	// A short input fits the server's context: served and charged; the server's count of the
	// prompt is noted.
	code, events, eb := generateSSE(t, e, key, genBody("summarizer", "Caddy is a web server.", "en", ""))
	if code != 200 {
		t.Fatalf("short input: %d %+v", code, eb)
	}
	if name, done, ev := lastEvent(t, events); name != "done" || done.CreditsUsed != 1 {
		t.Fatalf("short input: %s %+v %+v", name, done, ev)
	}

	// A longer one does not: text streams, then an error event, and nothing is charged.
	code, events, eb = generateSSE(t, e, key, genBody("summarizer", prose(1200), "en", ""))
	if code != 200 {
		t.Fatalf("cut input: %d %+v", code, eb)
	}
	name, done, ev := lastEvent(t, events)
	if name != "error" || ev.Error.Code != "input_too_large" || !strings.Contains(ev.Error.Message, "cut the prompt") {
		t.Fatalf("cut input: last event %s %+v %+v", name, done, ev)
	}
	// The same without SSE: the text is aborted, not ended as if complete.
	resp, err := e.post(context.Background(), key, genBody("summarizer", prose(1300), "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	_, readErr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || readErr == nil {
		t.Errorf("plain text of a cut prompt: status %d, read error %v; want an aborted body", resp.StatusCode, readErr)
	}

	if b := e.balance(acct.ID); b.Balance != 4 || b.Available != 4 {
		t.Errorf("balance %+v, want 4: only the short input charged", b)
	}
	if n := counterValue(metrics.contextRefusals.WithLabelValues("summarizer", "cut")) - cutBefore; n != 2 {
		t.Errorf("context_refusals_total{cut} rose by %v, want 2", n)
	}
	e.verify()
}

// An OpenAI-compatible server that refuses an over-long prompt (vLLM's 400 "maximum context
// length") is answered 413 input_too_large, free.
func TestServerRefusalIs413(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStatus, Status: 400,
		Message: "This model's maximum context length is 4096 tokens. However, you requested 6000 tokens."})
	e := newEnv(t, envOptions{ollama: fs.URL + "/v1", wire: "openai", extra: "context tiny 100000"})
	acct, key := e.account(2)
	resp, err := e.post(context.Background(), key, genBody("summarizer", prose(3000), "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	eb := decodeErr(t, resp)
	resp.Body.Close()
	if resp.StatusCode != 413 || eb.Error.Code != "input_too_large" || eb.Error.RequestID == "" {
		t.Fatalf("%d %+v", resp.StatusCode, eb)
	}
	if b := e.balance(acct.ID); b.Balance != 2 || b.Available != 2 {
		t.Errorf("balance %+v", b)
	}
}

// A model whose window is smaller than a tool needs is reported at start, once, as a warning,
// with each lowered tool's limit (the number the catalog states) and the setting to change; the
// model server's window is read at start.
func TestSmallWindowReportedAtStart(t *testing.T) {
	o := realOllama(t)
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	e := newEnv(t, envOptions{ollama: o.URL, settings: "max_input_chars 4500",
		global: "log {\n\t\toutput file " + logFile + "\n\t}"})
	var lines []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && len(lines) == 0; time.Sleep(100 * time.Millisecond) {
		raw, _ := os.ReadFile(logFile)
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.Contains(l, "holds less than max_input_chars") {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d reports of the tools whose limit the context lowers, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	var rec struct {
		Level  string   `json:"level"`
		Model  string   `json:"model"`
		Window int      `json:"window"`
		NumCtx int      `json:"num_ctx"`
		Tools  []string `json:"tools"`
		Msg    string   `json:"msg"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("%v: %s", err, lines[0])
	}
	if rec.Level != "warn" || rec.Model != ollamatest.DefaultModel || rec.Window != ollamatest.TinyWindow || rec.NumCtx != ollamatest.TinyWindow ||
		!strings.Contains(rec.Msg, "lower max_input_chars") {
		t.Errorf("report %+v", rec)
	}
	// vertrag-erklaerer (3,000 answer tokens) cannot take 4,500 characters in 8,192 tokens;
	// email-writer (1,024) can. The start does not ask the model server to count the
	// instructions (their bytes leave them more room than they take), so the log states the
	// limit by their bytes: above 0 and at most what the catalog states once counted.
	joined := strings.Join(rec.Tools, "\n")
	var logged int
	if _, err := fmt.Sscanf(joined[strings.Index(joined, "vertrag-erklaerer: ")+len("vertrag-erklaerer: "):], "%d characters (max_input_chars 4500; instructions up to ", &logged); err != nil ||
		!strings.Contains(joined, "answer 3000)") || strings.Contains(joined, "email-writer") {
		t.Fatalf("tools reported (%v):\n%s\nline: %s", err, joined, lines[0])
	}
	if catalog := catalogLimit(t, e, "vertrag-erklaerer"); logged <= 0 || logged > catalog {
		t.Errorf("the start-up log states %d characters for vertrag-erklaerer, the catalog %d", logged, catalog)
	}
}
