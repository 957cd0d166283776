package caddymodule

import (
	"errors"
	"fmt"
	"strings"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
)

// validateBackend checks the model servers' settings, the handler's and each tool's: Ollama
// hosts or OpenAI-compatible ones. The settings only Ollama takes are refused when no Ollama
// server is in use (the handler's are OpenAI-compatible and no tool has Ollama servers of its
// own): they would do nothing.
func (h *Handler) validateBackend() error {
	if err := validateServers("textgen: ", h.Ollama, h.OpenAI, h.APIKey); err != nil {
		return err
	}
	ollamaInUse := len(h.OpenAI) == 0
	for slug, tc := range h.Tools {
		if tc == nil {
			continue
		}
		if err := validateServers("textgen: tool "+slug+": ", tc.Ollama, tc.OpenAI, tc.APIKey); err != nil {
			return err
		}
		ollamaInUse = ollamaInUse || len(tc.Ollama) > 0
	}
	if ollamaInUse {
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

// validateServers checks one set of model servers: one kind, real URLs, a key only for OpenAI.
func validateServers(where string, ollama, openai []string, apiKey string) error {
	if len(ollama) > 0 && len(openai) > 0 {
		return fmt.Errorf("%sollama and openai: one kind of model server per handler or tool", where)
	}
	for _, u := range ollama {
		if strings.TrimSpace(u) == "" {
			return fmt.Errorf("%sollama: empty host", where)
		}
	}
	for _, u := range openai {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("%sopenai: host %q is not an http:// or https:// URL", where, u)
		}
	}
	if apiKey != "" && len(openai) == 0 {
		return fmt.Errorf("%sapi_key: only OpenAI-compatible hosts (openai) take a key", where)
	}
	return nil
}

// openToolBackends acquires the model servers of the tools that have their own (Provision).
func (h *Handler) openToolBackends(app *textgenapp.App) error {
	for slug, tc := range h.Tools {
		if tc == nil || len(tc.Ollama)+len(tc.OpenAI) == 0 {
			continue
		}
		ref, err := app.ModelServers(h.backendConfig(tc.Ollama, tc.OpenAI, tc.APIKey))
		if err != nil {
			return fmt.Errorf("textgen: tool %s: %w", slug, err)
		}
		h.tools[slug].backendRef = ref
	}
	return nil
}

func (h *Handler) releaseToolBackends() error {
	var errs []error
	for _, rt := range h.tools {
		if rt.backendRef != nil {
			errs = append(errs, rt.backendRef.Release())
		}
	}
	return errors.Join(errs...)
}

// ownBackend is the tool's own model servers: has is false when the tool uses the handler's,
// s is nil until the textgen app has opened them (Caddy starts apps in no order).
func (rt *toolRuntime) ownBackend() (s backends.ModelServers, has bool) {
	if rt.backendRef == nil {
		return nil, false
	}
	s, _ = rt.backendRef.Get()
	return s, true
}

// useToolBackend sends the generation to its tool's own model servers, if the tool has them.
// Until they are open (between the HTTP app's start and the textgen app's) the request gets
// 503 backend_unavailable, free, and never goes to the handler's servers instead.
func (g *generation) useToolBackend() *apiError {
	s, has := g.tool.ownBackend()
	switch {
	case !has:
		return nil
	case s == nil:
		return g.backendError(&backends.Error{Kind: backends.KindUnavailable, Err: errors.New("the tool's model servers are not open yet")})
	}
	g.backend = s
	return nil
}
