package caddymodule

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// The chat door's refusals of bodies the SDKs do not send, named as a generate request's are.
func TestChatBodyRefusals(t *testing.T) {
	for _, c := range []struct{ body, code, param string }{
		{`[]`, "invalid_json", ""},
		{`"text"`, "invalid_json", ""},
		{``, "invalid_json", ""},
		{`{"model":"summarizer"} {}`, "invalid_json", ""},
		{`{"model":7}`, "invalid_field", "model"},
		{`{"model":"summarizer","messages":"hello"}`, "invalid_field", "messages"},
	} {
		var cr chatRequest
		e := decodeChat([]byte(c.body), &cr)
		if e == nil {
			e = chatInputOf(&cr)
		}
		if e == nil || e.Status != http.StatusBadRequest || e.Code != c.code || e.Param != c.param {
			t.Errorf("%s: %+v, want %s %q", c.body, e, c.code, c.param)
		}
	}
	// A refusal of the input's text names the user's message, as its param does.
	oe := openAIError(newError(http.StatusBadRequest, "invalid_input", "input", "input is empty; send the text"), "req_1")
	if oe.Message != "the user message is empty; send the text" || oe.Param == nil || *oe.Param != "messages" {
		t.Errorf("%+v", oe)
	}
}

// chatInputOf is the input of a decoded body, or its refusal.
func chatInputOf(cr *chatRequest) *apiError {
	_, e := chatInput(cr.Messages)
	return e
}

// A completion that asks for fewer tokens than the tool's own answer ends at them ("length")
// and is a whole answer, charged: not a model that ran out of its context (the real model).
func TestChatMaxTokensRealOllama(t *testing.T) {
	o := realOllama(t)
	e := newEnv(t, envOptions{ollama: o.URL})
	acct, key := e.account(2)
	req, _ := http.NewRequest(http.MethodPost, baseURL+"/api/v1/chat/completions", strings.NewReader(
		`{"model":"summarizer","messages":[{"role":"user","content":"Caddy is a web server."}],"max_tokens":8}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 || len(c.Choices) != 1 ||
		c.Choices[0].FinishReason != "length" || c.Usage.CompletionTokens != 8 {
		t.Fatalf("max_tokens 8: %d %+v %v", resp.StatusCode, c, err)
	}
	// The charge settles just after the answer's last byte is written.
	waitFor(t, "the charge", func() bool { return e.count(acct.ID, ledger.KindSettle) == 1 })
	if b := e.balance(acct.ID); b.Balance != 1 || b.Available != 1 {
		t.Errorf("balance %+v, want 1 (charged once)", b)
	}
}
