package backends_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddy-textgen/textgen/backends"
)

// The real Ollama counts a system prompt with the model's chat template (a chat with an empty
// input and one token of answer): a count of the prompt as the model reads it, at most its bytes
// and the template's few tokens, and more for a longer prompt.
func TestCountSystemReal(t *testing.T) {
	srv := sharedOllama(t)
	o := newChat(t, backends.ChatConfig{Hosts: []string{srv.URL}})
	short := "You summarize the user's text in English."
	long := short + strings.Repeat(" Keep the names, the numbers and the dates of the text exactly as they are.", 10)
	ns, err := o.CountSystem(testCtx(t), srv.Model, short, 2048)
	if err != nil || !ns.Templated || ns.Tokens < 1 || ns.Tokens > len(short)+128 {
		t.Fatalf("count of %d bytes: %+v, %v", len(short), ns, err)
	}
	nl, err := o.CountSystem(testCtx(t), srv.Model, long, 2048)
	if err != nil || nl.Tokens <= ns.Tokens || nl.Tokens > len(long)+128 {
		t.Fatalf("count of %d bytes: %+v, %v (the %d-byte prompt counted %d)", len(long), nl, err, len(short), ns.Tokens)
	}
	if _, err := o.CountSystem(testCtx(t), "no-such-model", short, 2048); err == nil {
		t.Error("a count for a model the server does not have")
	}
	// Ollama's OpenAI-compatible API has no /tokenize: no count, said as such.
	oa := newChat(t, backends.ChatConfig{Wire: backends.NewOpenAIWire(""), Hosts: []string{srv.URL + "/v1"}})
	if n, err := oa.CountSystem(testCtx(t), srv.Model, short, 2048); !errors.Is(err, backends.ErrCountUnknown) {
		t.Errorf("OpenAI wire of Ollama: count %+v, %v; want ErrCountUnknown", n, err)
	}
}

// POST /tokenize of OpenAI-compatible servers, on a FAKE server (no llama.cpp server nor vLLM
// is available to the tests): llama.cpp's answer (a token list), vLLM's (a count), and a server
// without it. The body is sent beside /v1, with the bearer key; the count is of the text alone
// (not Templated), and with several hosts it is the largest.
func TestCountSystemTokenizeFake(t *testing.T) {
	var seen atomic.Value
	answer := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
				http.NotFound(w, r)
				return
			}
			var req map[string]any
			_ = json.NewDecoder(r.Body).Decode(&req)
			seen.Store([]any{r.Header.Get("Authorization"), req["content"], req["prompt"], req["model"]})
			_, _ = w.Write([]byte(body))
		}
	}
	llamacpp := httptest.NewServer(answer(`{"tokens":[1,2,3,4,5,6,7]}`))
	defer llamacpp.Close()
	vllm := httptest.NewServer(answer(`{"count":9,"max_model_len":2048,"tokens":[1,2,3,4,5,6,7,8,9]}`))
	defer vllm.Close()
	none := httptest.NewServer(http.NotFoundHandler())
	defer none.Close()

	c := newChat(t, backends.ChatConfig{Wire: backends.NewOpenAIWire("sk-test"), Hosts: []string{llamacpp.URL + "/v1"}})
	n, err := c.CountSystem(testCtx(t), "m", "be brief", 0)
	if err != nil || n.Tokens != 7 || n.Templated {
		t.Fatalf("llama.cpp: %+v, %v", n, err)
	}
	if got := seen.Load().([]any); got[0] != "Bearer sk-test" || got[1] != "be brief" || got[2] != "be brief" || got[3] != "m" {
		t.Errorf("request seen: %v", got)
	}
	c = newChat(t, backends.ChatConfig{Wire: backends.NewOpenAIWire(""), Hosts: []string{llamacpp.URL, vllm.URL + "/v1"}})
	if n, err := c.CountSystem(testCtx(t), "m", "be brief", 0); err != nil || n.Tokens != 9 {
		t.Errorf("two hosts: %+v, %v; want vLLM's 9, the largest", n, err)
	}
	c = newChat(t, backends.ChatConfig{Wire: backends.NewOpenAIWire(""), Hosts: []string{none.URL}})
	if n, err := c.CountSystem(testCtx(t), "m", "be brief", 0); !errors.Is(err, backends.ErrCountUnknown) {
		t.Errorf("no /tokenize: %+v, %v; want ErrCountUnknown", n, err)
	}
}
