package caddymodule

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/backends/ollamatest/gobin"
	"github.com/caddy-textgen/textgen/ledger"
)

// openaiNodeVersion is the pinned openai npm package that .ci/run installs into the cache.
const openaiNodeVersion = "6.49.0"

// openaiClient is one of the examples of docs/clients/openai and docs/clients/openai-go: the
// command line that runs it.
type openaiClient struct {
	name string
	argv []string
	// curl is chat.sh: it prints the answer as the server sent it (JSON or the events) and the
	// status and credit headers, and has no models check of its own.
	curl bool
}

var (
	openaiGoOnce sync.Once
	openaiGoBin  string
	openaiGoErr  error
)

// openaiClients are the JavaScript example with the official SDK, the Go example (built once per
// test run) and the curl one. A missing node, curl or SDK package fails the test (.ci/run
// installs all of them).
func openaiClients(t *testing.T) []openaiClient {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to run docs/clients/openai/chat.mjs: %v", err)
	}
	cache, err := gobin.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	modules := filepath.Join(cache, "openai-node-"+openaiNodeVersion, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "openai", "package.json")); err != nil {
		t.Fatalf("the openai npm package %s is not installed in %s (run .ci/run, which installs it there): %v",
			openaiNodeVersion, modules, err)
	}
	// Node resolves an ES module's `import "openai"` from the folders above the importing file
	// only (NODE_PATH does not apply to import), so chat.mjs runs as a copy in a folder beside the
	// cached node_modules.
	src, err := os.ReadFile(filepath.Join("..", "docs", "clients", "openai", "chat.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	jsDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(jsDir, "chat.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(jsDir, "node_modules")); err != nil {
		t.Fatal(err)
	}

	openaiGoOnce.Do(func() {
		openaiGoBin = filepath.Join(testRoot, "textgen-openai-go")
		var msg []byte
		msg, openaiGoErr = exec.Command("go", "build", "-o", openaiGoBin, "../docs/clients/openai-go").CombinedOutput()
		if openaiGoErr != nil {
			openaiGoErr = fmt.Errorf("%v: %s", openaiGoErr, msg)
		}
	})
	if openaiGoErr != nil {
		t.Fatalf("building docs/clients/openai-go: %v", openaiGoErr)
	}

	for _, prog := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Fatalf("%s is needed to run docs/clients/openai/chat.sh: %v", prog, err)
		}
	}
	return []openaiClient{
		{name: "javascript", argv: []string{node, filepath.Join(jsDir, "chat.mjs")}},
		{name: "go", argv: []string{openaiGoBin}},
		{name: "curl", argv: []string{"bash", filepath.Join("..", "docs", "clients", "openai", "chat.sh")}, curl: true},
	}
}

// run runs the example with key and the environment env for args (tool, input, language); it
// returns its output, its log and its exit code.
func (c openaiClient) run(t *testing.T, key string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.argv[0], append(c.argv[1:], args...)...)
	cmd.Env = append(os.Environ(), "TEXTGEN_URL="+baseURL, "TEXTGEN_KEY="+key)
	cmd.Env = append(cmd.Env, env...)
	var out, log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &log
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", c.name, err)
	}
	return out.String(), log.String(), code
}

// reportLine returns the fields (name=value) of the log's line that has credits_used=.
func reportLine(t *testing.T, log string) map[string]string {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "credits_used=") {
			continue
		}
		kv := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		return kv
	}
	t.Fatalf("no line with credits_used= in the log: %q", log)
	return nil
}

// chatCompletion is the part of a chat.completion (or of a chunk of one) that the test reads.
type chatCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// curlText reads what chat.sh printed: a chat.completion, or the events of a stream. It returns
// the text, the id the answer names, the finish_reason and the completion_tokens of its usage.
func curlText(t *testing.T, out string, stream bool) (text, id, finish string, tokens int) {
	t.Helper()
	if !stream {
		var c chatCompletion
		if err := json.Unmarshal([]byte(out), &c); err != nil {
			t.Fatalf("the answer is not a chat.completion: %v\n%s", err, out)
		}
		if c.Object != "chat.completion" || c.Model != "summarizer" || len(c.Choices) != 1 || c.Usage == nil ||
			c.Choices[0].Message.Role != "assistant" || c.Choices[0].FinishReason == nil ||
			c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens {
			t.Fatalf("the chat.completion lacks what the contract promises:\n%s", out)
		}
		return c.Choices[0].Message.Content, c.ID, *c.Choices[0].FinishReason, c.Usage.CompletionTokens
	}
	var b strings.Builder
	done, usage := false, false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if done {
			t.Fatalf("an event after data: [DONE]:\n%s", out)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c chatCompletion
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("an event is not a chunk: %v: %s", err, data)
		}
		if c.Object != "chat.completion.chunk" || c.ID == "" || (id != "" && c.ID != id) || usage {
			t.Fatalf("a chunk that does not belong (after the usage, another id, not a chunk): %s\n%s", data, out)
		}
		id = c.ID
		if len(c.Choices) == 0 {
			if c.Usage == nil {
				t.Fatalf("a chunk with neither choices nor usage: %s", data)
			}
			usage, tokens = true, c.Usage.CompletionTokens
			continue
		}
		if finish != "" {
			t.Fatalf("a chunk after the one with the finish_reason: %s\n%s", data, out)
		}
		b.WriteString(c.Choices[0].Delta.Content)
		if r := c.Choices[0].FinishReason; r != nil {
			finish = *r
		}
	}
	if !done || !usage {
		t.Fatalf("the stream lacks its usage chunk (%v) or data: [DONE] (%v):\n%s", usage, done, out)
	}
	return b.String(), id, finish, tokens
}

// TestOpenAIClients runs the OpenAI SDK examples (docs/clients/openai/chat.mjs with the official
// npm package, docs/clients/openai-go with the official Go module, and chat.sh with curl) against
// the real Caddy and the fault model server: a whole text and a stream (with usage) charged one
// credit each, an unknown tool refused by the models list (and, for curl, by the server), an
// empty account's 402 charging nothing, and an Idempotency-Key sent twice charging once.
func TestOpenAIClients(t *testing.T) {
	const pieces = 30
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: pieces, Piece: "Heron", Numbered: true, Delay: 5 * time.Millisecond})
	e := newEnv(t, envOptions{ollama: fsrv.URL, extra: "retention_key " + testRetentionKey})
	want := numbered("Heron", pieces)
	for _, c := range openaiClients(t) {
		t.Run(c.name, func(t *testing.T) {
			// charged: n completions charged once each, no more.
			charged := func(acctID string, n int) {
				t.Helper()
				waitFor(t, "the charge", func() bool { return e.count(acctID, ledger.KindSettle) == n })
				if b := e.balance(acctID); b.Balance != 3-int64(n) || b.Available != b.Balance {
					t.Fatalf("balance %+v, want %d: one credit a completion", b, 3-n)
				}
			}
			// complete runs the example for a whole text and checks the text, its report and the charge.
			complete := func(stream bool) {
				t.Helper()
				var env []string
				if stream {
					env = []string{"TEXTGEN_STREAM=1"}
				}
				acct, key := e.account(3)
				out, log, code := c.run(t, key, env, "summarizer", "x", "en")
				if code != 0 {
					t.Fatalf("stream %v: exit %d, printed %q\n%s", stream, code, out, log)
				}
				kv := reportLine(t, log)
				text, finish, tokens := out, kv["finish_reason"], kv["completion_tokens"]
				if c.curl {
					var id string
					var n int
					text, id, finish, n = curlText(t, out, stream)
					tokens = strconv.Itoa(n)
					if id != kv["request_id"] {
						t.Errorf("the answer's id %q is not its X-Request-Id %q", id, kv["request_id"])
					}
				}
				if text != want {
					t.Fatalf("stream %v: printed %q, want %q\n%s", stream, text, want, log)
				}
				if n, err := strconv.Atoi(tokens); err != nil || n <= 0 || finish != "stop" ||
					kv["credits_used"] != "1" || kv["credits_remaining"] != "2" || !strings.HasPrefix(kv["request_id"], "req_") {
					t.Fatalf("stream %v: reported %v (completion_tokens %q), want credits_used=1 credits_remaining=2, a request id, "+
						"finish_reason=stop and completion_tokens > 0\n%s", stream, kv, tokens, log)
				}
				charged(acct.ID, 1)
				// The id is the request id: the kept text is found by it.
				resp, body := e.getText(key, "/api/v1/generations/"+kv["request_id"])
				var kept struct{ Text string }
				if err := json.Unmarshal([]byte(body), &kept); err != nil || resp.StatusCode != 200 || kept.Text != want {
					t.Fatalf("GET /api/v1/generations/%s: %d %s", kv["request_id"], resp.StatusCode, body)
				}
			}
			complete(false)
			complete(true)

			// A tool the key may not call: the SDK examples find it missing from the models list
			// (exit 3) and ask for no completion; curl's request is refused with 404 model_not_found.
			acct, key := e.account(3)
			out, log, code := c.run(t, key, nil, "no-such-tool", "x", "en")
			if c.curl {
				var b apiErrBody
				if err := json.Unmarshal([]byte(out), &b); err != nil || code != 1 || !strings.Contains(log, "status=404") ||
					b.Error.Code != "model_not_found" || b.Error.RequestID == "" {
					t.Fatalf("unknown model: exit %d, printed %q, log %q; want 404 model_not_found with a request_id", code, out, log)
				}
			} else if code != 3 || out != "" || !strings.Contains(log, `no tool "no-such-tool"`) {
				t.Fatalf("unknown tool: exit %d, printed %q, log %q; want exit 3 from the models list", code, out, log)
			}
			if n, b := e.count(acct.ID, ledger.KindHold), e.balance(acct.ID); n != 0 || b.Balance != 3 || b.Available != 3 {
				t.Fatalf("unknown tool: %d holds, balance %+v; want nothing held or charged", n, b)
			}

			// An account with no credits: 402 insufficient_credits, exit 2, nothing charged.
			acct, key = e.account(0)
			out, log, code = c.run(t, key, nil, "summarizer", "x", "en")
			switch {
			case code != 2 || !strings.Contains(log, "status=402"):
				t.Fatalf("402: exit %d, printed %q, log %q; want exit 2 and status 402", code, out, log)
			case c.curl:
				var b apiErrBody
				if err := json.Unmarshal([]byte(out), &b); err != nil || b.Error.Code != "insufficient_credits" ||
					b.Error.RequestID == "" || !strings.Contains(log, "credits_used=0") {
					t.Fatalf("402: printed %q, log %q; want insufficient_credits, a request_id and X-Credits-Used: 0", out, log)
				}
			case out != "" || !strings.Contains(log, "code=insufficient_credits"):
				t.Fatalf("402: printed %q, log %q; want code=insufficient_credits", out, log)
			case c.name == "javascript" && !strings.Contains(log, "class=APIError "):
				// The SDK has no class of its own for 402: it is the generic APIError.
				t.Fatalf("402: log %q; want class=APIError", log)
			}
			if n, b := e.count(acct.ID, ledger.KindSettle), e.balance(acct.ID); n != 0 || b.Balance != 0 {
				t.Fatalf("402: %d charges, balance %+v; want nothing charged", n, b)
			}

			// The model fails in the middle of a stream: the stream ends with the error, which the
			// SDKs raise (exit 1), and nothing is charged.
			acct, key = e.account(3)
			fsrv.Set(ollamatest.FaultConfig{Mode: ollamatest.FaultErrorAfter, Pieces: 3, Piece: "Heron", Numbered: true})
			out, log, code = c.run(t, key, []string{"TEXTGEN_STREAM=1"}, "summarizer", "x", "en")
			fsrv.Set(ollamatest.FaultConfig{Pieces: pieces, Piece: "Heron", Numbered: true, Delay: 5 * time.Millisecond})
			last := strings.TrimSpace(out)
			if i := strings.LastIndex(last, "data: "); i >= 0 {
				last = last[i:]
			}
			switch {
			case code != 1:
				t.Fatalf("a model failure mid-stream: exit %d, printed %q, log %q; want exit 1", code, out, log)
			case c.curl:
				if !strings.HasPrefix(last, `data: {"error":`) || !strings.Contains(last, `"backend_error"`) {
					t.Fatalf("a model failure mid-stream: the stream does not end with its error event:\n%s", out)
				}
			case !strings.Contains(log, "backend_error") || (c.name == "javascript" && !strings.Contains(log, "class=APIError")):
				t.Fatalf("a model failure mid-stream: printed %q, log %q; want the SDK's error with code backend_error", out, log)
			}
			waitFor(t, "the hold's release", func() bool { return e.count(acct.ID, ledger.KindVoid) == 1 })
			if n, b := e.count(acct.ID, ledger.KindSettle), e.balance(acct.ID); n != 0 || b.Balance != 3 || b.Available != 3 {
				t.Fatalf("a model failure mid-stream: %d charges, balance %+v; want nothing charged", n, b)
			}

			// The same Idempotency-Key twice: the second gets the first's text at no charge.
			acct, key = e.account(3)
			idem := []string{"TEXTGEN_IDEMPOTENCY_KEY=openai-" + c.name}
			var texts, used []string
			for range 2 {
				out, log, code = c.run(t, key, idem, "summarizer", "x", "en")
				text := out
				if c.curl {
					text, _, _, _ = curlText(t, out, false)
				}
				if code != 0 {
					t.Fatalf("Idempotency-Key: exit %d, printed %q\n%s", code, out, log)
				}
				texts, used = append(texts, text), append(used, reportLine(t, log)["credits_used"])
			}
			if texts[0] != want || texts[1] != want || used[0] != "1" || used[1] != "0" {
				t.Fatalf("Idempotency-Key twice: texts %q, credits_used %q; want the text twice, charged 1 then 0", texts, used)
			}
			charged(acct.ID, 1)
			if n := e.count(acct.ID, ledger.KindHold); n != 1 {
				t.Fatalf("Idempotency-Key twice: %d holds, want 1", n)
			}
		})
	}
}
