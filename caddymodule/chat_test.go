package caddymodule

import (
	"net/http"
	"testing"
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
