package caddymodule

import (
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/caddymodule/wires"
)

// loadWires loads the wires of the model servers, the handler's and each tool's own
// (textgen.wires modules, provisioned and validated by Caddy), and refuses num_ctx where no
// wire in use takes it: it would do nothing.
func (h *Handler) loadWires(ctx caddy.Context) error {
	var err error
	if h.wire, err = loadWire(ctx, h, "textgen: "); err != nil {
		return err
	}
	sizesContext := sizes(h.wire)
	for slug, tc := range h.Tools {
		if tc == nil || len(tc.WireRaw) == 0 {
			continue
		}
		if tc.wire, err = loadWire(ctx, tc, "textgen: tool "+slug+": "); err != nil {
			return err
		}
		sizesContext = sizesContext || sizes(tc.wire)
	}
	if h.NumCtx != 0 && !sizesContext {
		return fmt.Errorf("textgen: num_ctx: none of the model servers runs a model with a context size it is given (Ollama does); set the context size on the model server")
	}
	return nil
}

// loadWire loads the WireRaw field of config (a Handler or a ToolConfig).
func loadWire(ctx caddy.Context, config any, where string) (wires.Module, error) {
	m, err := ctx.LoadModule(config, "WireRaw")
	if err != nil {
		return nil, fmt.Errorf("%swire: %w", where, err)
	}
	w, ok := m.(wires.Module)
	if !ok {
		return nil, fmt.Errorf("%swire: %T is not a model-server wire (wires.Module)", where, m)
	}
	return w, nil
}

// sizes reports whether w's servers run a model with the context size a request names.
func sizes(w wires.Module) bool {
	s, ok := w.(wires.ContextSizer)
	return ok && s.SizesContext()
}

// pulls reports whether w's start-up check pulls the models its servers lack.
func pulls(w wires.Module) bool {
	p, ok := w.(wires.Puller)
	return ok && p.PullModels()
}

// openServers acquires the model servers of wire w with the handler's timeouts and admission
// (opened by the textgen app's Start).
func (h *Handler) openServers(app *textgenapp.App, w wires.Module) (*textgenapp.ServersRef, error) {
	key, err := wires.Key(w)
	if err != nil {
		return nil, err
	}
	cfg := backends.ChatConfig{
		Hosts:             w.Hosts(),
		Wire:              w.Wire(),
		ConnectTimeout:    time.Duration(h.ConnectTimeout),
		FirstPieceTimeout: time.Duration(h.FirstPieceTimeout),
		IdleTimeout:       time.Duration(h.IdleTimeout),
		QueueTimeout:      time.Duration(h.QueueTimeout),
		Logger:            h.logger.Named(wires.Name(w)),
	}
	// -1 (off) in the handler is 0 (none) in the backend.
	if h.MaxInFlight > 0 {
		cfg.MaxInFlight = h.MaxInFlight
		if h.QueueSize > 0 {
			cfg.QueueSize = h.QueueSize
		}
	}
	if h.lim != nil && h.lim.hosts != nil && cfg.MaxInFlight > 0 {
		cfg.HostCounter = hostCounter{slots: h.lim.hosts, store: h.lim.shared.Name() + "|" + time.Duration(h.SlotExpiry).String()}
	}
	return app.ModelServers(cfg, key)
}

// openToolBackends acquires the model servers of the tools that have their own (Provision).
func (h *Handler) openToolBackends(app *textgenapp.App) error {
	for slug, tc := range h.Tools {
		if tc == nil || tc.wire == nil {
			continue
		}
		ref, err := h.openServers(app, tc.wire)
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

// toolBackend is the model servers the generation goes to: its tool's own, if the tool has
// them, else the handler's (g.backend). Until the tool's are open (between the HTTP app's start
// and the textgen app's) the request gets 503 backend_unavailable, free, and never goes to the
// handler's servers instead.
func (g *generation) toolBackend() (backends.ModelServers, *apiError) {
	s, has := g.ask.tool.ownBackend()
	switch {
	case !has:
		return g.backend, nil
	case s == nil:
		return g.backend, g.backendError(&backends.Error{Kind: backends.KindUnavailable, Err: errors.New("the tool's model servers are not open yet")})
	}
	return s, nil
}
