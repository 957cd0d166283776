package caddymodule

import (
	"cmp"
	"encoding/json"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-textgen/textgen/caddymodule/internal/cfarg"
	"github.com/caddy-textgen/textgen/caddymodule/wires"
)

// The Caddyfile names the model servers of the handler and of each tool in one of two ways: a
// shorthand for the two wires built in (`ollama <hosts...>` or `openai <hosts...>` with
// `api_key`), or the general form, `wire <name> { ... }`, which the textgen.wires.<name> module
// reads itself (as reverse_proxy's `transport <name> { }` does). Both become the "wire" field's
// module. The handler's `keep_alive` and `pull_models` are Ollama's: they go into every Ollama
// wire of the handler and its tools that does not set its own.

// wireDraft is one scope's model servers (the handler's or a tool's) as the Caddyfile names them.
type wireDraft struct {
	where  string       // "" or "tool <slug>: ", before its errors
	name   string       // "ollama", "openai" or the wire block's name; "": not named
	block  caddy.Module // the wire block's module
	hosts  []string     // the shorthand's
	apiKey *string      // api_key
}

// ollamaShared are the handler's Ollama settings that every Ollama wire takes.
type ollamaShared struct {
	keepAlive caddy.Duration
	pull      bool
}

// parse reads the subdirective at d if it is one of the model servers' (ollama, openai, api_key,
// wire); ok reports whether it was.
func (w *wireDraft) parse(d *caddyfile.Dispenser) (ok bool, err error) {
	switch name := d.Val(); name {
	case "ollama", "openai":
		if w.name != "" {
			return true, d.Errf("%s%s and %s: one kind of model server per handler or tool", w.where, w.name, name)
		}
		w.name = name
		if w.hosts = d.RemainingArgs(); len(w.hosts) == 0 {
			return true, d.ArgErr()
		}
	case "api_key":
		var key string
		if err := cfarg.String(d, &key); err != nil {
			return true, err
		}
		w.apiKey = &key
	case "wire":
		if !d.NextArg() {
			return true, d.ArgErr()
		}
		if w.name != "" {
			return true, d.Errf("%swire %s and %s: one kind of model server per handler or tool", w.where, d.Val(), w.name)
		}
		w.name = d.Val()
		unm, err := caddyfile.UnmarshalModule(d, wires.Namespace+"."+w.name)
		if err != nil {
			return true, err
		}
		m, isWire := unm.(wires.Module)
		if !isWire {
			return true, d.Errf("%swire %s: module %T is not a model-server wire", w.where, w.name, unm)
		}
		w.block = m
	default:
		return false, nil
	}
	return true, nil
}

// module is the wire module the draft names, nil when it names none.
func (w *wireDraft) module(d *caddyfile.Dispenser) (caddy.Module, error) {
	switch {
	case w.apiKey != nil && w.block != nil:
		return nil, d.Errf("%sapi_key: a wire block takes its settings inside it (wire %s { api_key ... })", w.where, w.name)
	case w.apiKey != nil && w.name != "openai":
		return nil, d.Errf("%sapi_key: only OpenAI-compatible hosts (openai) take a key", w.where)
	}
	switch {
	case w.block != nil:
		return w.block, nil
	case w.name == "ollama":
		return &wires.Ollama{HostList: w.hosts}, nil
	case w.name == "openai":
		m := &wires.OpenAI{HostList: w.hosts}
		if w.apiKey != nil {
			m.APIKey = *w.apiKey
		}
		return m, nil
	}
	return nil, nil
}

// setWires fills the "wire" fields of the handler and its tools from their drafts, with the
// handler's Ollama settings in every Ollama wire. A setting no Ollama wire takes is refused: it
// would do nothing.
func (h *Handler) setWires(d *caddyfile.Dispenser, handler *wireDraft, tools map[string]*wireDraft, shared ollamaShared) error {
	drafts := []*wireDraft{handler}
	for _, w := range tools {
		drafts = append(drafts, w)
	}
	mods := map[*wireDraft]caddy.Module{}
	for _, w := range drafts {
		m, err := w.module(d)
		if err != nil {
			return err
		}
		mods[w] = m
	}
	if mods[handler] == nil && (shared.keepAlive != 0 || shared.pull) {
		mods[handler], handler.name = &wires.Ollama{}, "ollama" // the default wire, with these settings
	}
	ollamas := 0
	for _, m := range mods {
		if o, ok := m.(*wires.Ollama); ok {
			ollamas++
			o.KeepAlive = cmp.Or(o.KeepAlive, shared.keepAlive)
			o.Pull = o.Pull || shared.pull
		}
	}
	switch {
	case ollamas == 0 && shared.pull:
		return d.Errf("pull_models: an Ollama setting, and no model servers here are Ollama's; serve the models on the model server")
	case ollamas == 0 && shared.keepAlive != 0:
		return d.Errf("keep_alive: an Ollama setting, and no model servers here are Ollama's; the others keep their models loaded themselves")
	}
	h.WireRaw = wireJSON(mods[handler], handler.name)
	for slug, w := range tools {
		h.Tools[slug].WireRaw = wireJSON(mods[w], w.name)
	}
	return nil
}

// wireJSON is m as the value of a "wire" field; nil for no module.
func wireJSON(m caddy.Module, name string) json.RawMessage {
	if m == nil {
		return nil
	}
	return caddyconfig.JSONModuleObject(m, "api", name, nil)
}
