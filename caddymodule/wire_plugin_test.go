package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"

	// textgen.wires.ollama_generate: a wire of another package, as another plugin adds one.
	_ "github.com/caddy-textgen/textgen/caddymodule/wires/wirestest"
)

// A wire of another package plugs in as a textgen.wires module: a Caddyfile names it in a
// `wire <name> { }` block, and the real Caddy streams a generation through it (Ollama's
// /api/generate on the real Ollama), charged one credit as on the built-in wires.
func TestThirdWireThroughCaddy(t *testing.T) {
	o := realOllama(t)
	e := newEnv(t, envOptions{wire: "wire ollama_generate {\n\t\t\thosts " + o.URL + "\n\t\t}"})
	acct, key := e.account(3)

	resp, err := e.post(context.Background(), key, genBody("email-writer", "Ask my landlord to fix the heating.", "en", "friendly"))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := checkStreamed(t, resp, "2")
	if strings.TrimSpace(text) == "" {
		t.Fatal("empty text")
	}
	if b := e.balance(acct.ID); b.Balance != 2 || b.Available != 2 {
		t.Errorf("balance after one request: %+v, want 2/2", b)
	}
	settles := 0
	for _, en := range e.entries(acct.ID) {
		if en.Kind == ledger.KindSettle {
			settles++
		}
	}
	if settles != 1 {
		t.Errorf("%d settles, want 1", settles)
	}
	wired := false
	for k := range textgenapp.OpenServers() {
		wired = wired || strings.Contains(k, "|wire textgen.wires.ollama_generate ") && strings.Contains(k, o.URL)
	}
	if !wired {
		t.Errorf("no model servers of the wire ollama_generate at %s are open", o.URL)
	}

	// A JSON answer needs a wire that sends the format on (backends.FormatWire); this one does
	// not, so a chat completion that asks for one is refused at the door, free.
	req, _ := http.NewRequest(http.MethodPost, baseURL+"/api/v1/chat/completions", strings.NewReader(
		`{"model":"summarizer","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	r, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var oe openAIErrorBody
	err = json.NewDecoder(r.Body).Decode(&oe)
	r.Body.Close()
	if err != nil || r.StatusCode != 400 || oe.Error.Param == nil || *oe.Error.Param != "response_format" || oe.Error.Code != "unsupported_field" {
		t.Errorf("response_format through a wire without formats: %d %+v %v", r.StatusCode, oe, err)
	}
	if b := e.balance(acct.ID); b.Available != 2 {
		t.Errorf("balance after the refusal: %+v, want 2 available", b)
	}
	e.verify()
}
