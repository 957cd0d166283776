package caddymodule

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestCORS: with cors_origins, a preflight from an allowed origin is answered 204 with the
// methods and headers a browser app needs (no credentials), and the answers carry the origin and
// the headers it may read; another origin gets no CORS headers, and nothing changes for a request
// without an Origin.
func TestCORS(t *testing.T) {
	fs := fastBackend(t)
	e := newEnv(t, envOptions{ollama: fs.URL, extra: "cors_origins https://app.example.com http://localhost:3000"})
	_, key := e.account(10)
	preflight := func(origin string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodOptions, baseURL+"/api/v1/generate", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type, x-api-key, idempotency-key")
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	resp := preflight("https://app.example.com")
	h := resp.Header
	if resp.StatusCode != 204 || h.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "X-API-Key") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Idempotency-Key") ||
		h.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("preflight: %d %v", resp.StatusCode, h)
	}
	if resp := preflight("https://evil.example"); resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.StatusCode == 204 {
		t.Fatalf("preflight from another origin: %d %v", resp.StatusCode, resp.Header)
	}

	// The OpenAI JavaScript SDK in a browser sends its X-Stainless-* headers with every request:
	// its preflight allows them, and the SDK may read X-Should-Retry.
	req, _ := http.NewRequest(http.MethodOptions, baseURL+"/api/v1/chat/completions", nil)
	req.Header.Set("Origin", "https://app.example.com")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, x-stainless-os, x-stainless-retry-count, x-evil")
	sdk, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sdk.Body.Close()
	allowed := sdk.Header.Get("Access-Control-Allow-Headers")
	if sdk.StatusCode != 204 || !strings.Contains(allowed, "x-stainless-os") || !strings.Contains(allowed, "x-stainless-retry-count") ||
		strings.Contains(allowed, "x-evil") {
		t.Fatalf("the OpenAI SDK's preflight: %d %q", sdk.StatusCode, allowed)
	}

	post := func(origin string) *http.Response {
		t.Helper()
		hdr := []string{}
		if origin != "" {
			hdr = []string{"Origin", origin}
		}
		resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""), hdr...)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	resp = post("http://localhost:3000")
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Credits-Remaining") ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Should-Retry") ||
		!strings.Contains(strings.Join(resp.Header.Values("Vary"), ","), "Origin") {
		t.Fatalf("POST from an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	for _, origin := range []string{"https://evil.example", ""} {
		if resp := post(origin); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("POST from %q: %d %v", origin, resp.StatusCode, resp.Header)
		}
	}
}

// TestCORSOff: by default a preflight is not answered (405, no CORS headers).
func TestCORSOff(t *testing.T) {
	fs := fastBackend(t)
	e := newEnv(t, envOptions{ollama: fs.URL})
	req, _ := http.NewRequest(http.MethodOptions, baseURL+"/api/v1/generate", nil)
	req.Header.Set("Origin", "https://app.example.com")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight without cors_origins: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestCORSOriginsConfig(t *testing.T) {
	for in, ok := range map[string]bool{
		"cors_origins https://app.example.com http://localhost:3000": true,
		"cors_origins *":                        true,
		"cors_origins https://app.example.com/": false,
		"cors_origins app.example.com":          false,
		"cors_origins https://App.example.com":  false,
		"cors_origins":                          false,
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("textgen {\n ledger x\n " + in + "\n}"))
		if err == nil {
			err = validateCORSOrigins(h.CORSOrigins)
		}
		if (err == nil) != ok {
			t.Errorf("%q: %v", in, err)
		}
	}
}
