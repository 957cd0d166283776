package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/internal/freeport"
	"github.com/caddy-textgen/textgen/ledger"
	"go.uber.org/zap"
)

// A handler configured with "openai" streams from an OpenAI-compatible server (the real Ollama's
// /v1/chat/completions) through the real Caddy, charges one credit, and reports the server's
// token count in the SSE done event; readiness probes the server's /v1/models.
func TestOpenAIBackendThroughCaddy(t *testing.T) {
	o := realOllama(t)
	e := newEnv(t, envOptions{ollama: o.URL + "/v1", wire: "openai"})
	acct, key := e.account(3)

	resp, err := e.post(context.Background(), key, genBody("email-writer", "Ask my landlord to fix the heating.", "en", "friendly"))
	if err != nil {
		t.Fatal(err)
	}
	text, chunks := checkStreamed(t, resp, "2")
	if strings.TrimSpace(text) == "" {
		t.Fatal("empty text")
	}
	assertPiecesOverTime(t, chunks)
	if b := e.balance(acct.ID); b.Balance != 2 || b.Available != 2 {
		t.Errorf("balance after one request: %+v, want 2/2", b)
	}
	var settles int
	for _, en := range e.entries(acct.ID) {
		if en.Kind == ledger.KindSettle {
			settles++
		}
	}
	if settles != 1 {
		t.Errorf("%d settles, want 1", settles)
	}

	// SSE: the done event carries the server's usage (stream_options.include_usage).
	req, _ := http.NewRequest("POST", baseURL+"/api/v1/generate", strings.NewReader(genBody("summarizer", "Caddy is a web server.", "en", "")))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	resp, err = e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(raw)
	// The tiny model's every token is one piece: the server's count is the number of deltas.
	deltas := strings.Count(body, "event: delta\n")
	if err != nil || resp.StatusCode != 200 || deltas == 0 || !strings.Contains(body, fmt.Sprintf(`"output_tokens":%d,"finish_reason":"`, deltas)) {
		t.Fatalf("SSE answer %d (%v):\n%s", resp.StatusCode, err, body)
	}

	// The readiness check asks the OpenAI-compatible server.
	r, err := e.client.Get(baseURL + "/api/v1/ready")
	if err != nil {
		t.Fatal(err)
	}
	rb := readAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Fatalf("ready: %d %s", r.StatusCode, rb)
	}
	e.verify()
}

// The key reaches the server as a bearer token, resolved from the environment at start and
// never written to the log; a refused key is a 502 that costs nothing.
func TestOpenAIBackendKey(t *testing.T) {
	t.Setenv("TEXTGEN_TEST_OPENAI_KEY", "sk-test-secret-4711")
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "w"})
	pluginLog := filepath.Join(t.TempDir(), "caddy.log")
	e := newEnv(t, envOptions{ollama: fs.URL, wire: "openai", extra: "api_key {env.TEXTGEN_TEST_OPENAI_KEY}",
		global: "log {\n\t\toutput file " + pluginLog + "\n\t\tlevel DEBUG\n\t}"})
	acct, key := e.account(2)
	resp, err := e.post(context.Background(), key, genBody("summarizer", "Text.", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := checkStreamed(t, resp, "1"); text != "www" {
		t.Fatalf("text %q", text)
	}
	if a := fs.LastAuthorization(); a != "Bearer sk-test-secret-4711" {
		t.Errorf("authorization %q", a)
	}

	fs.Set(ollamatest.FaultConfig{Mode: ollamatest.FaultStatus, Status: 401, Message: "invalid api key"})
	resp, err = e.post(context.Background(), key, genBody("summarizer", "Text.", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(body, "backend_error") {
		t.Errorf("refused key: %d %s", resp.StatusCode, body)
	}
	if b := e.balance(acct.ID); b.Balance != 1 {
		t.Errorf("balance %+v after a refused key, want 1", b)
	}
	if logs := readFile(t, pluginLog); logs == "" || strings.Contains(logs, "sk-test-secret-4711") {
		t.Errorf("the log is empty or holds the key:\n%s", logs)
	}
}

// A tool can name model servers of its own: here the summarizer goes to an OpenAI-compatible
// server (the fault server, with a key) while every other tool stays on the handler's Ollama.
func TestToolOwnBackend(t *testing.T) {
	o := realOllama(t)
	t.Setenv("TEXTGEN_TEST_TOOL_KEY", "sk-tool-key")
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Model: "hosted-model", Pieces: 4, Piece: "s"})
	e := newEnv(t, envOptions{ollama: o.URL, extra: fmt.Sprintf(`tool summarizer {
			openai %s/v1
			api_key {env.TEXTGEN_TEST_TOOL_KEY}
			model hosted-model
		}`, fs.URL)})
	acct, key := e.account(3)
	resp, err := e.post(context.Background(), key, genBody("summarizer", "Text.", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := checkStreamed(t, resp, "2"); text != "ssss" {
		t.Fatalf("summarizer text %q, want the OpenAI server's", text)
	}
	if fs.Requests() != 1 || fs.LastAuthorization() != "Bearer sk-tool-key" || fs.LastRequest().Model != "hosted-model" {
		t.Errorf("the tool's server got %d requests, authorization %q, model %q", fs.Requests(), fs.LastAuthorization(), fs.LastRequest().Model)
	}
	resp, err = e.post(context.Background(), key, genBody("email-writer", "Ask for a day off.", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := checkStreamed(t, resp, "1"); strings.TrimSpace(text) == "" {
		t.Fatal("email-writer: empty text")
	}
	if fs.Requests() != 1 {
		t.Errorf("another tool's request went to the summarizer's server")
	}
	if b := e.balance(acct.ID); b.Balance != 1 {
		t.Errorf("balance %+v after two requests, want 1", b)
	}
	e.verify()
}

// GET /api/v1/ready counts the model servers a tool has of its own, and names a tool none of
// whose servers is healthy while the handler's still serve: the server stays ready for the
// other tools, and that tool's requests get 503 and cost nothing.
func TestReadyCountsToolBackends(t *testing.T) {
	o := realOllama(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Model: "hosted-model", Pieces: 2, Piece: "s"})
	dead := fmt.Sprintf("http://127.0.0.1:%d", freeport.MustPick(1)[0]) // nothing listens there
	e := newEnv(t, envOptions{ollama: o.URL, extra: fmt.Sprintf(`tool summarizer {
			openai %s/v1
			model hosted-model
		}
		tool text-rewriter {
			ollama %s
		}
		tool grammar-checker {
			ollama %s
		}`, fs.URL, dead, dead)})
	acct, key := e.account(2)

	// The dead server's host is marked down by the request that cannot reach it.
	resp, err := e.post(context.Background(), key, genBody("text-rewriter", "Text.", "de", ""))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("text-rewriter on a dead server: %d %s", resp.StatusCode, body)
	}

	r, err := e.client.Get(baseURL + "/api/v1/ready")
	if err != nil {
		t.Fatal(err)
	}
	var doc readyDoc
	err = json.NewDecoder(r.Body).Decode(&doc)
	r.Body.Close()
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("ready: %d %v", r.StatusCode, err)
	}
	// The handler's Ollama, the summarizer's server and the dead one the two tools share, each
	// counted once; both tools that use the dead one are named.
	if !doc.Ready || doc.Hosts != 3 || doc.HostsHealthy != 2 || !slices.Equal(doc.ToolsUnavailable, []string{"grammar-checker", "text-rewriter"}) {
		t.Errorf("ready: %+v, want ready, 3 hosts, 2 healthy, grammar-checker and text-rewriter unavailable", doc)
	}
	if b := e.balance(acct.ID); b.Balance != 2 {
		t.Errorf("balance %+v after a request the dead server could not take, want 2", b)
	}
	e.verify()
}

// A tool's own model servers, until the textgen app has opened them, refuse its requests
// (503 backend_unavailable) instead of sending them to the handler's servers; once open they
// take them.
func TestToolBackendNotOpenYet(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Model: "hosted-model", Pieces: 1})
	app := &textgenapp.App{}
	ref, err := app.ModelServers(backends.ChatConfig{Wire: backends.NewOpenAIWire(""), Hosts: []string{fs.URL}}, "openai")
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	handlers := &backends.Chat{} // stands for the handler's servers: must never be chosen here
	g := &generation{h: &Handler{logger: zap.NewNop()}, ask: ask{tool: &toolRuntime{backendRef: ref}}, backend: handlers}
	if b, e := g.toolBackend(); e == nil || e.Code != "backend_unavailable" || e.Status != http.StatusServiceUnavailable || b != handlers {
		t.Fatalf("before the tool's servers are open: %v, backend changed %v", e, b != handlers)
	}
	if err := ref.Open(); err != nil {
		t.Fatal(err)
	}
	own, _ := ref.Get()
	if b, e := g.toolBackend(); e != nil || b != own {
		t.Fatalf("once open: %v, backend is the tool's %v", e, b == own)
	}
	g = &generation{ask: ask{tool: &toolRuntime{}}, backend: handlers}
	if b, e := g.toolBackend(); e != nil || b != handlers {
		t.Fatalf("a tool without servers of its own: %v", e)
	}
}

func readAll(r io.Reader) string {
	b, _ := io.ReadAll(r)
	return string(b)
}
