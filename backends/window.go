package backends

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
		w, err := c.wire.Window(ctx, c.host(h), model)
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

// positiveInt is v as a positive int when it is a JSON number that is one.
func positiveInt(v any) (int, bool) {
	f, ok := v.(float64)
	if !ok || f < 1 || f > 1<<31 || f != float64(int(f)) {
		return 0, false
	}
	return int(f), true
}
