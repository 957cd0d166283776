package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"
)

// A JSON config may still name the model servers with the fields the "wire" module replaced:
// the handler's "ollama", "openai", "api_key", "keep_alive" and "pull_models", a tool's "ollama",
// "openai" and "api_key" (as configs adapted from a Caddyfile did, and Caddy's autosave.json of
// them holds). UnmarshalJSON turns them into the "wire" they mean, so such a config loads and
// runs as before; everything else is decoded as strictly as Caddy decodes any module.

// flatServers are those fields.
type flatServers struct {
	Ollama     []string       `json:"ollama,omitempty"`
	OpenAI     []string       `json:"openai,omitempty"`
	APIKey     *string        `json:"api_key,omitempty"`
	KeepAlive  caddy.Duration `json:"keep_alive,omitempty"`
	PullModels bool           `json:"pull_models,omitempty"`
}

// UnmarshalJSON decodes the handler's config, with its model servers in "wire" or in the flat
// fields (above).
func (h *Handler) UnmarshalJSON(data []byte) error {
	type plain Handler // without this method
	var flat struct {
		flatServers
		Tools map[string]*flatServers `json:"tools,omitempty"`
	}
	fields, err := splitFields(data, &flat, "ollama", "openai", "api_key", "keep_alive", "pull_models")
	if err != nil {
		return err
	}
	if err := strictDecode(fields, (*plain)(h)); err != nil {
		return err
	}
	// The handler's keep_alive and pull_models were those of every Ollama server, its own and
	// its tools'.
	shared := flat.flatServers
	ollamas := 0
	for slug, f := range flat.Tools {
		tc := h.Tools[slug]
		if f == nil || tc == nil {
			continue
		}
		w, err := flatWire(f, shared, false, tc.WireRaw, "tool "+slug+": ")
		if err != nil {
			return err
		}
		if w != nil {
			tc.WireRaw = w
			if len(f.Ollama) > 0 {
				ollamas++
			}
		}
	}
	w, err := flatWire(&flat.flatServers, shared, true, h.WireRaw, "")
	if err != nil {
		return err
	}
	if w != nil {
		h.WireRaw = w
		if len(flat.OpenAI) == 0 {
			ollamas++
		}
	}
	switch {
	case ollamas > 0:
	case shared.PullModels:
		return fmt.Errorf("pull_models: an Ollama setting, and no model servers here are Ollama's; serve the models on the model server")
	case shared.KeepAlive != 0:
		return fmt.Errorf("keep_alive: an Ollama setting, and no model servers here are Ollama's; the others keep their models loaded themselves")
	}
	return nil
}

// splitFields decodes the flat model-server fields of data (and of its tools) into flat and
// returns data without them.
func splitFields(data []byte, flat any, names ...string) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, flat); err != nil {
		return nil, err
	}
	for _, n := range names {
		delete(fields, n)
	}
	if raw, ok := fields["tools"]; ok {
		var tools map[string]map[string]json.RawMessage
		if err := json.Unmarshal(raw, &tools); err != nil {
			return nil, err
		}
		for _, tc := range tools {
			delete(tc, "ollama")
			delete(tc, "openai")
			delete(tc, "api_key")
		}
		raw, err := json.Marshal(tools)
		if err != nil {
			return nil, err
		}
		fields["tools"] = raw
	}
	return json.Marshal(fields)
}

// strictDecode decodes data into v refusing unknown fields, as caddy.StrictUnmarshalJSON does.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// flatWire is the "wire" that f's fields mean, with the handler's Ollama settings shared; nil if
// they name none. The handler's own (handler) are Ollama's without a server named, as that is
// its default. wire is the "wire" field beside them, which they may not contradict.
func flatWire(f *flatServers, shared flatServers, handler bool, wire json.RawMessage, where string) (json.RawMessage, error) {
	var m map[string]any
	switch {
	case len(f.Ollama) > 0 && len(f.OpenAI) > 0:
		return nil, fmt.Errorf("%sollama and openai: one kind of model server per handler or tool", where)
	case len(f.OpenAI) > 0:
		m = map[string]any{"api": "openai", "hosts": f.OpenAI}
		if f.APIKey != nil {
			m["api_key"] = *f.APIKey
		}
	case f.APIKey != nil:
		return nil, fmt.Errorf("%sapi_key: only OpenAI-compatible hosts (openai) take a key", where)
	case len(f.Ollama) > 0 || (handler && (shared.KeepAlive != 0 || shared.PullModels)):
		m = map[string]any{"api": "ollama"}
		if len(f.Ollama) > 0 {
			m["hosts"] = f.Ollama
		}
		if shared.KeepAlive != 0 {
			m["keep_alive"] = shared.KeepAlive
		}
		if shared.PullModels {
			m["pull_models"] = true
		}
	default:
		return nil, nil
	}
	if len(wire) > 0 {
		return nil, errors.New(where + "wire: the model servers are named twice, by wire and by ollama or openai")
	}
	return json.Marshal(m)
}
