package caddymodule

import (
	"fmt"
	"strings"
)

// validateBackend checks the model servers' settings: Ollama hosts or OpenAI-compatible ones,
// and the settings only one kind takes.
func (h *Handler) validateBackend() error {
	if len(h.Ollama) > 0 && len(h.OpenAI) > 0 {
		return fmt.Errorf("textgen: ollama and openai: a handler streams from one kind of model server; use another textgen handler (route) for the other")
	}
	for _, u := range h.Ollama {
		if strings.TrimSpace(u) == "" {
			return fmt.Errorf("textgen: ollama: empty host")
		}
	}
	for _, u := range h.OpenAI {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("textgen: openai: host %q is not an http:// or https:// URL", u)
		}
	}
	if len(h.OpenAI) == 0 {
		if h.APIKey != "" {
			return fmt.Errorf("textgen: api_key: only OpenAI-compatible hosts (openai) take a key")
		}
		return nil
	}
	switch {
	case h.PullModels:
		return fmt.Errorf("textgen: pull_models: models cannot be pulled through the OpenAI API; serve them on the model server")
	case h.KeepAlive != 0:
		return fmt.Errorf("textgen: keep_alive: an Ollama setting; OpenAI-compatible servers keep their models loaded themselves")
	case h.NumCtx != 0:
		return fmt.Errorf("textgen: num_ctx: an Ollama setting; set the context size on the OpenAI-compatible server")
	}
	return nil
}
