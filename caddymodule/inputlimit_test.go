package caddymodule

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/catalog"
)

// catalogLimit is a tool's max_input_chars as GET /api/v1/tools states it.
func catalogLimit(t *testing.T, e *env, slug string) int {
	t.Helper()
	r, doc := e.getText("", "/api/v1/tools")
	var cat struct {
		Tools []struct {
			Slug          string `json:"slug"`
			MaxInputChars int    `json:"max_input_chars"`
		} `json:"tools"`
	}
	if r.StatusCode != 200 || json.Unmarshal([]byte(doc), &cat) != nil {
		t.Fatalf("GET /api/v1/tools: %d %s", r.StatusCode, doc)
	}
	for _, tl := range cat.Tools {
		if tl.Slug == slug {
			return tl.MaxInputChars
		}
	}
	t.Fatalf("%s is not in the catalog: %s", slug, doc)
	return 0
}

var atMostRE = regexp.MustCompile(`accepts at most (\d+)`)

// statedLimit is the limit a 413 input_too_large states.
func statedLimit(t *testing.T, eb apiErrBody) int {
	t.Helper()
	m := atMostRE.FindStringSubmatch(eb.Error.Message)
	if m == nil {
		t.Fatalf("no limit in %+v", eb)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// longestSystemBytes is the length of the longest system prompt of a tool with the default
// languages.
func longestSystemBytes(t *testing.T, slug string) int {
	t.Helper()
	m, err := catalog.NewLanguageMatcher(catalog.Languages)
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := catalog.Default().Lookup(slug)
	return (&Handler{languages: m}).longestSystemOf(&toolRuntime{Tool: tool})
}

// A model whose window is 2,048 tokens (TinyLlama and phi-2 class models run so), with an answer
// budget that leaves fewer tokens than a short input's bytes once the tool's instructions count
// at their bytes: the model server counts the instructions instead, and a short input is served
// and charged 1 credit. The catalog states the limit that applies; an input of that many
// characters is served whole (Ollama cuts nothing), one more character is refused with the
// same number, and an input that cannot fit is refused; the refusals are free.
func TestSmallWindowServesShortInputs(t *testing.T) {
	o := soloOllama(t)
	const window, slug = 2048, "summarizer"
	short := "Caddy is a web server. Summarize what it does, please."
	output := window - (longestSystemBytes(t, slug) + templateAllowance) - len(short) + 10
	if output < 100 {
		t.Fatalf("the instructions of %s leave %d tokens of answer in %d", slug, output, window)
	}
	e := newEnv(t, envOptions{ollama: o.URL, extra: "context " + o.Model + " " + strconv.Itoa(window) +
		"\n\t\tmax_output_tokens " + strconv.Itoa(output)})
	acct, key := e.account(5)
	cutsBefore := o.LogCount("truncating input prompt")

	code, events, eb := generateSSE(t, e, key, genBody(slug, short, "en", ""))
	if code != 200 {
		t.Fatalf("a %d-character input in a %d-token window: %d %+v", len(short), window, code, eb)
	}
	if name, done, ev := lastEvent(t, events); name != "done" || done.CreditsUsed != 1 {
		t.Fatalf("short input: last event %s %+v %+v", name, done, ev)
	}

	limit := catalogLimit(t, e, slug)
	if limit < len(short) || limit >= 20000 {
		t.Fatalf("the catalog states %d characters for %s", limit, slug)
	}
	code, _, eb = generateSSE(t, e, key, genBody(slug, prose(limit+1), "de", "formal"))
	if code != 413 || eb.Error.Code != "input_too_large" || eb.Error.Param != "input" || statedLimit(t, eb) != limit {
		t.Errorf("%d characters, one over the catalog's limit: %d %+v", limit+1, code, eb)
	}
	code, _, eb = generateSSE(t, e, key, genBody(slug, prose(3000), "en", ""))
	if code != 413 || eb.Error.Code != "input_too_large" || statedLimit(t, eb) != limit ||
		!strings.Contains(eb.Error.Message, "no credit was charged") {
		t.Errorf("3000 characters: %d %+v", code, eb)
	}
	// The limit holds for the longest instructions (the longest language name, a tone).
	code, events, eb = generateSSE(t, e, key, genBody(slug, prose(limit), "de", "formal"))
	if code != 200 {
		t.Fatalf("%d characters, the catalog's limit: %d %+v", limit, code, eb)
	}
	if name, done, ev := lastEvent(t, events); name != "done" || done.CreditsUsed != 1 {
		t.Errorf("at the limit: last event %s %+v %+v", name, done, ev)
	}
	if n := o.LogCount("truncating input prompt") - cutsBefore; n != 0 {
		t.Errorf("Ollama cut %d prompts", n)
	}
	if b := e.balance(acct.ID); b.Balance != 3 || b.Available != 3 {
		t.Errorf("balance %+v, want 3: two served, the refusals free", b)
	}
	e.verify()
}

// A server that cannot count the instructions (Ollama's OpenAI-compatible API has no
// /tokenize) leaves the input alone to be checked against the context: a short input is served
// in a 2,048-token window, the catalog's limit is the context less the answer, and a longer
// input is refused with that number, free.
func TestSmallWindowWithoutCountChecksTheInputAlone(t *testing.T) {
	o := realOllama(t)
	const window, output = 2048, 200
	e := newEnv(t, envOptions{ollama: o.URL + "/v1", wire: "openai", extra: "context " + o.Model + " " + strconv.Itoa(window) +
		"\n\t\tmax_output_tokens " + strconv.Itoa(output)})
	acct, key := e.account(2)
	code, events, eb := generateSSE(t, e, key, genBody("summarizer", "Caddy is a web server.", "en", ""))
	if code != 200 {
		t.Fatalf("short input: %d %+v", code, eb)
	}
	if name, done, ev := lastEvent(t, events); name != "done" || done.CreditsUsed != 1 {
		t.Fatalf("short input: last event %s %+v %+v", name, done, ev)
	}
	limit := catalogLimit(t, e, "summarizer")
	if limit != window-output {
		t.Errorf("the catalog states %d characters, want %d (the context less the answer)", limit, window-output)
	}
	code, _, eb = generateSSE(t, e, key, genBody("summarizer", prose(limit+1), "en", ""))
	if code != 413 || eb.Error.Code != "input_too_large" || statedLimit(t, eb) != limit {
		t.Errorf("one character over: %d %+v", code, eb)
	}
	if b := e.balance(acct.ID); b.Balance != 1 {
		t.Errorf("balance %+v, want 1", b)
	}
	e.verify()
}

// The same with an OpenAI-compatible server that counts with POST /tokenize (llama.cpp's
// server, vLLM): a FAKE /tokenize (no such server is available to the tests; it counts a token
// for every 4 bytes, as real tokenizers do for English) in front of the fault server, which
// streams the answers. A short input in a 2,048-token window is served and charged; the
// catalog's limit is accepted, one character more is refused with the same number, free.
func TestSmallWindowCountedByTokenize(t *testing.T) {
	const window, slug = 2048, "summarizer"
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 4})
	target, err := url.Parse(fs.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var counted atomic.Int64
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" {
			proxy.ServeHTTP(w, r)
			return
		}
		counted.Add(1)
		var req struct {
			Content string `json:"content"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		_ = json.NewEncoder(w).Encode(map[string]any{"tokens": make([]int, len(req.Content)/4)})
	}))
	t.Cleanup(fake.Close)
	short := "Caddy is a web server. Summarize what it does, please."
	output := window - (longestSystemBytes(t, slug) + templateAllowance) - len(short) + 10
	e := newEnv(t, envOptions{ollama: fake.URL + "/v1", wire: "openai", extra: "context tiny " + strconv.Itoa(window) +
		"\n\t\tmax_output_tokens " + strconv.Itoa(output)})
	acct, key := e.account(3)
	code, events, eb := generateSSE(t, e, key, genBody(slug, short, "en", ""))
	if code != 200 {
		t.Fatalf("a %d-character input in a %d-token window: %d %+v", len(short), window, code, eb)
	}
	if name, done, ev := lastEvent(t, events); name != "done" || done.CreditsUsed != 1 {
		t.Fatalf("short input: last event %s %+v %+v", name, done, ev)
	}
	limit := catalogLimit(t, e, slug)
	if limit < len(short) || limit >= 20000 {
		t.Fatalf("the catalog states %d characters for %s", limit, slug)
	}
	code, _, eb = generateSSE(t, e, key, genBody(slug, prose(limit+1), "de", "formal"))
	if code != 413 || eb.Error.Code != "input_too_large" || statedLimit(t, eb) != limit {
		t.Errorf("one character over the catalog's limit: %d %+v", code, eb)
	}
	code, events, eb = generateSSE(t, e, key, genBody(slug, prose(limit), "de", "formal"))
	if name, done, ev := lastEvent(t, events); code != 200 || name != "done" || done.CreditsUsed != 1 {
		t.Errorf("at the catalog's limit of %d: %d %+v, last event %s %+v %+v", limit, code, eb, name, done, ev)
	}
	if n := counted.Load(); n < 1 || n > int64(len(catalog.Default().Slugs())) {
		t.Errorf("the instructions were counted %d times, want at most once per tool", n)
	}
	if b := e.balance(acct.ID); b.Balance != 1 || b.Available != 1 {
		t.Errorf("balance %+v, want 1: two served, the refusal free", b)
	}
	e.verify()
}
