package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/ollama/ollama/api"
)

// A model's window is the most tokens its context can hold: the prompt (the chat template, the
// system prompt and the input) and the answer together. A prompt longer than the context a model
// server runs with is cut by some servers without a word (Ollama drops the system message, then
// the front of the input), so the caller sizes the context and checks each prompt against it
// (caddymodule's context.go); this file only finds out the window.

// ErrWindowUnknown: the model server does not report the window of the model.
var ErrWindowUnknown = errors.New("the model server does not report the model's context window")

// windows caches the windows found, per normalized model name. A failure is not cached: the
// model may be pulled, or the host come up, later.
type windows struct {
	mu    sync.Mutex
	known map[string]int
}

// KnownWindow is the window found earlier for model, if any; it asks no server.
func (c *Chat) KnownWindow(model string) (int, bool) {
	c.windows.mu.Lock()
	defer c.windows.mu.Unlock()
	w, ok := c.windows.known[NormalizeModel(model)]
	return w, ok
}

// ContextWindow finds model's window: Ollama's model information (/api/show, the
// "<architecture>.context_length" of the model file), or, on the OpenAI-compatible wire, what
// the server's model list says of it (context_length, max_model_len, ...). With several hosts
// it is the smallest any host reports, as a request may go to any of them. ErrWindowUnknown:
// no host reports it (a `context` setting must say it then).
func (c *Chat) ContextWindow(ctx context.Context, model string) (int, error) {
	if w, ok := c.KnownWindow(model); ok {
		return w, nil
	}
	smallest := 0
	var errs []error
	for _, h := range c.hosts {
		var (
			w   int
			err error
		)
		if c.cfg.API == APIOpenAI {
			w, err = c.openaiWindow(ctx, h, model)
		} else {
			w, err = ollamaWindow(ctx, h, model)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", h.name, err))
			continue
		}
		if smallest == 0 || w < smallest {
			smallest = w
		}
	}
	if smallest == 0 {
		if len(errs) == 0 {
			errs = append(errs, ErrWindowUnknown)
		}
		return 0, errors.Join(errs...)
	}
	c.windows.mu.Lock()
	if c.windows.known == nil {
		c.windows.known = make(map[string]int)
	}
	c.windows.known[NormalizeModel(model)] = smallest
	c.windows.mu.Unlock()
	return smallest, nil
}

// ollamaWindow reads the model's context length from Ollama's /api/show.
func ollamaWindow(ctx context.Context, h *chatHost, model string) (int, error) {
	show, err := h.api.Show(ctx, &api.ShowRequest{Model: model})
	if err != nil {
		return 0, err
	}
	for k, v := range show.ModelInfo {
		if !strings.HasSuffix(k, ".context_length") {
			continue
		}
		if n, ok := positiveInt(v); ok {
			return n, nil
		}
	}
	return 0, ErrWindowUnknown
}

// openaiWindow looks for the model in the host's GET /v1/models and reads the field its server
// reports the window in: context_length (OpenRouter, LM Studio), max_model_len (vLLM),
// context_window, max_context_length, or meta.n_ctx_train (llama.cpp's server).
func (c *Chat) openaiWindow(ctx context.Context, h *chatHost, model string) (int, error) {
	resp, err := c.getModels(ctx, h)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s: %s", h.modelsURL, resp.Status, clip(bytes.TrimSpace(raw)))
	}
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return 0, fmt.Errorf("GET %s: %w", h.modelsURL, err)
	}
	want := NormalizeModel(model)
	for _, m := range list.Data {
		if id, _ := m["id"].(string); NormalizeModel(id) != want {
			continue
		}
		for _, field := range []string{"context_length", "max_model_len", "context_window", "max_context_length"} {
			if n, ok := positiveInt(m[field]); ok {
				return n, nil
			}
		}
		if meta, ok := m["meta"].(map[string]any); ok {
			if n, ok := positiveInt(meta["n_ctx_train"]); ok {
				return n, nil
			}
		}
		return 0, ErrWindowUnknown
	}
	return 0, fmt.Errorf("model %q is not in the model list", model)
}

// positiveInt is v as a positive int when it is a JSON number that is one.
func positiveInt(v any) (int, bool) {
	f, ok := v.(float64)
	if !ok || f < 1 || f > 1<<31 || f != float64(int(f)) {
		return 0, false
	}
	return int(f), true
}
