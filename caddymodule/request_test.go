package caddymodule

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestParseGenRequest(t *testing.T) {
	ok := []struct {
		body string
		want genRequest
	}{
		{`{"tool":"summarizer","input":"hi","language":"de"}`, genRequest{Tool: "summarizer", Input: "hi", Language: "de"}},
		{` {"tone":"formal","language":"en","input":"x\n","tool":"email-writer"} `, genRequest{Tool: "email-writer", Input: "x\n", Language: "en", Tone: "formal"}},
		{`{"tool":"summarizer","input":"\u00fc","language":"de","tone":null}`, genRequest{Tool: "summarizer", Input: "ü", Language: "de"}},
	}
	for _, c := range ok {
		got, e := parseGenRequest([]byte(c.body))
		if e != nil {
			t.Errorf("%s: unexpected error %v", c.body, e)
			continue
		}
		if got.Tool != c.want.Tool || got.Input != c.want.Input || got.Language != c.want.Language || got.Tone != c.want.Tone {
			t.Errorf("%s: got %+v, want %+v", c.body, got, c.want)
		}
	}

	bad := []struct {
		body, code, param string
	}{
		{``, "invalid_json", ""},
		{`[]`, "invalid_json", ""},
		{`"x"`, "invalid_json", ""},
		{`{"tool":"a"`, "invalid_json", ""},
		{`{"tool":"a",}`, "invalid_json", ""},
		{`{"tool":"summarizer","input":"hi","language":"de"} {}`, "invalid_json", ""},
		{`{"tool":"summarizer","input":"hi","language":"de"}x`, "invalid_json", ""},
		{`{"tool":"summarizer","input":"hi","language":"de","model":"x"}`, "unknown_field", "model"},
		{`{"tool":"summarizer","tool":"summarizer","input":"hi","language":"de"}`, "invalid_field", "tool"},
		{`{"tool":1,"input":"hi","language":"de"}`, "invalid_field", "tool"},
		{`{"tool":"summarizer","input":{"a":1},"language":"de"}`, "invalid_field", "input"},
		{`{"tool":"summarizer","input":null,"language":"de"}`, "invalid_field", "input"},
		{`{"tool":"summarizer","input":"hi","language":"de","tone":5}`, "invalid_field", "tone"},
		{`{"input":"hi","language":"de"}`, "missing_field", "tool"},
		{`{"tool":"summarizer","language":"de"}`, "missing_field", "input"},
		{`{"tool":"summarizer","input":"hi"}`, "missing_field", "language"},
		{"{\"tool\":\"summarizer\",\"input\":\"\xff\xfe\",\"language\":\"de\"}", "invalid_utf8", "input"},
	}
	for _, c := range bad {
		_, e := parseGenRequest([]byte(c.body))
		if e == nil {
			t.Errorf("%q: accepted", c.body)
			continue
		}
		if e.Code != c.code || e.Param != c.param || e.Status != http.StatusBadRequest || e.Message == "" {
			t.Errorf("%q: got %d %s param=%q (%s), want 400 %s param=%q", c.body, e.Status, e.Code, e.Param, e.Message, c.code, c.param)
		}
	}
}

func TestCheckContentType(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                  true,
		"application/json; charset=utf-8":   true,
		"Application/JSON; charset=UTF-8":   true,
		"application/json;charset=latin-1":  false,
		"text/plain":                        false,
		"":                                  false,
		"application/x-www-form-urlencoded": false,
		"application/jsonx":                 false,
	} {
		r := httptest.NewRequest("POST", "/", nil)
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		e := checkContentType(r)
		if (e == nil) != want {
			t.Errorf("%q: accepted=%v, want %v", ct, e == nil, want)
		}
		if e != nil && (e.Status != http.StatusUnsupportedMediaType || e.Code != "unsupported_media_type") {
			t.Errorf("%q: got %d %s", ct, e.Status, e.Code)
		}
	}
}

func TestReadBodyLimit(t *testing.T) {
	body := strings.Repeat("a", 100)
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	if buf, e := readBody(r, 100); e != nil || buf.Len() != 100 {
		t.Fatalf("100 bytes at limit 100: %v", e)
	}
	r = httptest.NewRequest("POST", "/", strings.NewReader(body+"b"))
	if _, e := readBody(r, 100); e == nil || e.Code != "body_too_large" || e.Status != 413 {
		t.Fatalf("101 bytes at limit 100: %v", e)
	}
	// Without a Content-Length (chunked), the limit still holds.
	r = httptest.NewRequest("POST", "/", strings.NewReader(body+"b"))
	r.ContentLength = -1
	if _, e := readBody(r, 100); e == nil || e.Code != "body_too_large" {
		t.Fatalf("chunked 101 bytes at limit 100: %v", e)
	}
}

func TestWantsSSE(t *testing.T) {
	for accept, want := range map[string]bool{
		"text/event-stream":                   true,
		"text/plain, text/event-stream;q=0.9": true,
		"*/*":                                 false,
		"":                                    false,
		"text/plain":                          false,
	} {
		r := httptest.NewRequest("POST", "/", nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		if got := wantsSSE(r); got != want {
			t.Errorf("%q: got %v", accept, got)
		}
	}
}

func TestNewRequestID(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := newRequestID()
		if len(id) != 26 || !strings.HasPrefix(id, "req_") || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
}

// TestWriteErrorLeavesSharedErrorsAlone: the errors a client causes are shared values, answered
// by many requests at once; each answer must carry its own request id, and the shared value none.
func TestWriteErrorLeavesSharedErrorsAlone(t *testing.T) {
	var wg sync.WaitGroup
	bodies := make([]string, 64)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := httptest.NewRecorder()
			writeError(rec, fmt.Sprint("req_", i), errUnsupportedMedia, -1)
			bodies[i] = rec.Body.String()
		}()
	}
	wg.Wait()
	for i, b := range bodies {
		if want := fmt.Sprintf(`"request_id":"req_%d"`, i); !strings.Contains(b, want) {
			t.Errorf("answer %d: %s, want %s", i, b, want)
		}
	}
	if errUnsupportedMedia.RequestID != "" {
		t.Fatalf("the shared error value was changed: request_id %q", errUnsupportedMedia.RequestID)
	}
}
