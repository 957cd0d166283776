package caddymodule

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestKeyMaskedDownstream: once the handler has read the API key, what runs after it sees only
// the key's prefix and last 4 characters (as the handler's own log line shows a key), never the
// secret: here Caddy's `header` directive, deferred to the response, copies the request's key
// headers into the response through placeholders, on generate, balance and a kept generation,
// for X-API-Key and for Authorization: Bearer.
//
// Caddy's access log is not such a reader: it takes a copy of the request before any handler
// runs (docs/OPERATING.md, "Logs").
func TestKeyMaskedDownstream(t *testing.T) {
	fs := fastBackend(t)
	e := newEnv(t, envOptions{ollama: fs.URL, site: "header {\n\t\tdefer\n\t\tX-Seen-Key \"{http.request.header.X-Api-Key}\"\n\t\tX-Seen-Auth \"{http.request.header.Authorization}\"\n\t}"})
	_, key := e.account(10)
	masked := key[:len("tg_live_")] + "..." + key[len(key)-4:]
	check := func(what string, resp *http.Response, hdr, want string) {
		t.Helper()
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", what, resp.StatusCode)
		}
		all := resp.Header.Get("X-Seen-Key") + " " + resp.Header.Get("X-Seen-Auth")
		if strings.Contains(all, key[len("tg_live_"):len(key)-4]) {
			t.Fatalf("%s: a handler after textgen saw the key: %q", what, all)
		}
		if got := resp.Header.Get(hdr); got != want {
			t.Fatalf("%s: a handler after textgen saw %s %q, want %q", what, hdr, got, want)
		}
	}
	for _, auth := range []struct{ name, value, seen, want string }{
		{"X-API-Key", key, "X-Seen-Key", masked},
		{"Authorization", "Bearer " + key, "X-Seen-Auth", "Bearer " + masked},
	} {
		resp, err := e.post(context.Background(), "", genBody("summarizer", "x", "en", ""), auth.name, auth.value)
		if err != nil {
			t.Fatal(err)
		}
		rid := resp.Header.Get("X-Request-Id")
		check(auth.name+" generate", resp, auth.seen, auth.want)
		resp, err = e.getWith(context.Background(), "", "/api/v1/balance", auth.name, auth.value)
		if err != nil {
			t.Fatal(err)
		}
		check(auth.name+" balance", resp, auth.seen, auth.want)
		resp, err = e.getWith(context.Background(), "", generationsPath+rid, auth.name, auth.value)
		if err != nil {
			t.Fatal(err)
		}
		check(auth.name+" generations", resp, auth.seen, auth.want)
	}
}
