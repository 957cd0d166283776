package caddymodule

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// A JSON config that names the model servers with the flat fields (ollama, openai, api_key,
// keep_alive, pull_models) is decoded, as strictly as any module, into the wire they mean.
func TestFlatServersJSON(t *testing.T) {
	for config, want := range map[string][2]string{ // the handler's wire, tool s's
		`{"ledger":"x","openai":["https://llm/v1"],"api_key":"{env.K}","keep_alive":60000000000,"tools":{"s":{"model":"m","ollama":["http://gpu1:11434"]}}}`: {
			`{"api":"openai","api_key":"{env.K}","hosts":["https://llm/v1"]}`, `{"api":"ollama","hosts":["http://gpu1:11434"],"keep_alive":60000000000}`},
		`{"ledger":"x","ollama":["http://a:11434"],"pull_models":true,"tools":{"s":{"openai":["http://b:8000"]}}}`: {
			`{"api":"ollama","hosts":["http://a:11434"],"pull_models":true}`, `{"api":"openai","hosts":["http://b:8000"]}`},
		`{"ledger":"x","keep_alive":"10m","tools":{"s":{"model":"m"}}}`: {`{"api":"ollama","keep_alive":600000000000}`, ""},
		`{"ledger":"x","wire":{"api":"openai","hosts":["http://b"]},"tools":{"s":{"wire":{"api":"ollama"}}}}`: {
			`{"api":"openai","hosts":["http://b"]}`, `{"api":"ollama"}`},
		`{"ledger":"x"}`: {"", ""},
	} {
		var h Handler
		if err := caddy.StrictUnmarshalJSON([]byte(config), &h); err != nil {
			t.Errorf("%s: %v", config, err)
			continue
		}
		var tool string
		if tc := h.Tools["s"]; tc != nil {
			tool = string(tc.WireRaw)
		}
		if got := [2]string{string(h.WireRaw), tool}; got != want || h.Ledger != "x" {
			t.Errorf("%s: wires %s, ledger %q; want %s", config, got, h.Ledger, want)
		}
	}
	for config, want := range map[string]string{
		`{"ledger":"x","bogus":1}`:                                        "unknown field",
		`{"tools":{"s":{"keep_alive":1}}}`:                                "unknown field",
		`{"ollama":["http://a"],"openai":["http://b"]}`:                   "one kind",
		`{"ollama":["http://a"],"api_key":"k"}`:                           "api_key",
		`{"openai":["http://b"],"keep_alive":60000000000}`:                "keep_alive",
		`{"openai":["http://b"],"pull_models":true}`:                      "pull_models",
		`{"wire":{"api":"ollama"},"ollama":["http://a"]}`:                 "named twice",
		`{"tools":{"s":{"wire":{"api":"ollama"},"openai":["http://b"]}}}`: "tool s: wire",
	} {
		var h Handler
		if err := caddy.StrictUnmarshalJSON([]byte(config), &h); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", config, err, want)
		}
	}
}
