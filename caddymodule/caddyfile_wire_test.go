package caddymodule

import (
	"context"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// parseTextgen reads a textgen block of these settings.
func parseTextgen(t *testing.T, settings string) (*Handler, error) {
	t.Helper()
	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("textgen {\n" + settings + "\n}"))
	return &h, err
}

// The model servers of a Caddyfile, in shorthand or in a wire block, become the "wire" modules
// of the handler and its tools; the handler's keep_alive and pull_models go into each Ollama wire
// that does not set its own.
func TestCaddyfileWires(t *testing.T) {
	for settings, want := range map[string][2]string{ // the handler's wire, tool summarizer's
		"ollama http://a:11434": {`{"api":"ollama","hosts":["http://a:11434"]}`, ""},
		"openai https://api.example.com/v1\napi_key {env.KEY}\ntool summarizer {\nollama gpu:11434\n}": {
			`{"api":"openai","api_key":"{env.KEY}","hosts":["https://api.example.com/v1"]}`, `{"api":"ollama","hosts":["gpu:11434"]}`},
		"keep_alive 1m\npull_models\ntool summarizer {\nopenai http://b:8000\n}": {
			`{"api":"ollama","keep_alive":60000000000,"pull_models":true}`, `{"api":"openai","hosts":["http://b:8000"]}`},
		"openai http://b:8000\nkeep_alive 1m\ntool summarizer {\nollama http://gpu:11434\n}": {
			`{"api":"openai","hosts":["http://b:8000"]}`, `{"api":"ollama","hosts":["http://gpu:11434"],"keep_alive":60000000000}`},
		"wire ollama {\nhosts http://a:11434\nkeep_alive 2m\n}\nkeep_alive 1m": {
			`{"api":"ollama","hosts":["http://a:11434"],"keep_alive":120000000000}`, ""},
		"tool summarizer {\nwire openai {\nhosts http://b:8000\napi_key k\n}\n}": {
			"", `{"api":"openai","api_key":"k","hosts":["http://b:8000"]}`},
	} {
		h, err := parseTextgen(t, settings)
		if err != nil {
			t.Errorf("%q: %v", settings, err)
			continue
		}
		var tool string
		if tc := h.Tools["summarizer"]; tc != nil {
			tool = string(tc.WireRaw)
		}
		if got := [2]string{string(h.WireRaw), tool}; got != want {
			t.Errorf("%q: wires %s, want %s", settings, got, want)
		}
	}
}

// Settings of the model servers that contradict each other or would do nothing are refused when
// the Caddyfile is read.
func TestCaddyfileWireErrors(t *testing.T) {
	for settings, want := range map[string]string{
		"ollama http://a:11434\nopenai http://b:8000":                  "ollama and openai: one kind",
		"ollama http://a:11434\napi_key k":                             "api_key: only OpenAI-compatible",
		"openai http://b:8000\npull_models":                            "pull_models",
		"openai http://b:8000\nkeep_alive 1m":                          "keep_alive",
		"tool summarizer {\nollama a\nopenai http://b\n}":              "tool summarizer: ollama and openai",
		"tool summarizer {\nollama a\napi_key k\n}":                    "tool summarizer: api_key",
		"wire ollama {\nbogus 1\n}":                                    "unrecognized subdirective 'bogus'",
		"wire openai {\nhosts http://b\nhosts http://c\n}":             "openai: hosts specified more than once",
		"wire ollama extra {\nhosts a\n}":                              "wrong argument count",
		"wire nosuch":                                                  "getting module named 'textgen.wires.nosuch'",
		"wire ollama {\nhosts http://a:11434\n}\nopenai http://b:8000": "ollama and openai: one kind",
		"wire openai {\nhosts http://b:8000\n}\napi_key k":             "api_key",
	} {
		if _, err := parseTextgen(t, settings); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", settings, err, want)
		}
	}
}

// The wires are loaded as Caddy modules, which check their own settings; num_ctx stands only
// where a wire in use takes it (Ollama's, the handler's or a tool's).
func TestLoadWires(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	for settings, want := range map[string]string{
		"openai b:8000": "openai: host",
		"openai http://b:8000\nnum_ctx 4096\ntool summarizer {\nopenai http://c:8000\n}":    "num_ctx",
		"openai http://b:8000\nnum_ctx 4096\ntool summarizer {\nollama http://gpu:11434\n}": "",
		"num_ctx 4096\ntool summarizer {\nopenai http://b:8000\n}":                          "",
		"openai https://api.example.com/v1\napi_key {env.KEY}":                              "",
	} {
		h, err := parseTextgen(t, settings)
		if err != nil {
			t.Fatalf("%q: %v", settings, err)
		}
		h.setDefaults()
		err = h.loadWires(ctx)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: got %v, want %q", settings, err, want)
		}
		if err == nil && (h.wire == nil || len(h.wire.Hosts()) == 0 || h.wire.Wire() == nil) {
			t.Errorf("%q: the handler's wire %#v has no hosts or no backends.Wire", settings, h.wire)
		}
	}
}
