package backends_test

import (
	"errors"
	"testing"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

// The real Ollama reports the tiny model's window (its GGUF's llama.context_length) on its own
// API; its OpenAI-compatible model list does not, so that wire needs a `context` setting.
func TestContextWindowReal(t *testing.T) {
	srv := sharedOllama(t)
	o := newChat(t, backends.ChatConfig{Hosts: []string{srv.URL}})
	if _, ok := o.KnownWindow(srv.Model); ok {
		t.Fatal("a window known before anyone asked")
	}
	w, err := o.ContextWindow(testCtx(t), srv.Model)
	if err != nil || w != ollamatest.TinyWindow {
		t.Fatalf("window %d, %v; want %d", w, err, ollamatest.TinyWindow)
	}
	if w, ok := o.KnownWindow(srv.Model + ":latest"); !ok || w != ollamatest.TinyWindow {
		t.Errorf("known window of the same model spelled with its tag: %d %v", w, ok)
	}
	if _, err := o.ContextWindow(testCtx(t), "no-such-model"); err == nil {
		t.Error("a window for a model the server does not have")
	}

	oa := newChat(t, backends.ChatConfig{Wire: backends.NewOpenAIWire(""), Hosts: []string{srv.URL + "/v1"}})
	if w, err := oa.ContextWindow(testCtx(t), srv.Model); !errors.Is(err, backends.ErrWindowUnknown) {
		t.Errorf("OpenAI wire of Ollama: window %d, %v; want ErrWindowUnknown", w, err)
	}
}

// A server that reports windows (Ollama's model information, vLLM's max_model_len): with
// several hosts the window is the smallest, since a request may go to any of them.
func TestContextWindowSmallestOfHosts(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		big := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 1, Window: 32768})
		small := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 1, Window: 8192})
		hosts := []string{big.URL, small.URL}
		if api == apiOpenAI {
			hosts = []string{big.URL + "/v1", small.URL + "/v1"}
		}
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: hosts})
		if w, err := o.ContextWindow(testCtx(t), ollamatest.DefaultModel); err != nil || w != 8192 {
			t.Fatalf("window %d, %v; want 8192", w, err)
		}
		none := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 1})
		hosts = []string{none.URL}
		if api == apiOpenAI {
			hosts = []string{none.URL + "/v1"}
		}
		o = newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: hosts})
		if w, err := o.ContextWindow(testCtx(t), ollamatest.DefaultModel); !errors.Is(err, backends.ErrWindowUnknown) {
			t.Errorf("a server that reports no window: %d, %v", w, err)
		}
	})
}
