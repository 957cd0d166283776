package caddymodule

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

// The model's silence before its first piece needs a server that waits on demand: the fault
// server's paced pieces (the real model's load time cannot be set).

// TestSSEKeepAlive: while the model has not sent its first piece, an SSE stream gets comment
// lines (so idle proxies keep the connection), then its pieces and done, charged once; a
// plain-text stream gets none; a first piece that never comes ends the SSE stream with an error
// event after its keep-alives, charged nothing.
func TestSSEKeepAlive(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 2, Piece: "tok ", Delay: 700 * time.Millisecond})
	fs.Set(ollamatest.FaultConfig{Model: "mute", Pieces: 1, Piece: "late", Delay: 5 * time.Second})
	e := newEnv(t, envOptions{ollama: fs.URL, firstPiece: "1500ms", extra: "sse_keepalive 200ms\n\t\ttool email-writer {\n\t\t\tmodel mute\n\t\t}"})
	acct, key := e.account(10)
	var rid string // the X-Request-Id of the last answer
	get := func(tool string, sse bool) (int, string) {
		t.Helper()
		hdr := []string{}
		if sse {
			hdr = []string{"Accept", "text/event-stream"}
		}
		resp, err := e.post(context.Background(), key, genBody(tool, "x", "en", ""), hdr...)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rid = resp.Header.Get("X-Request-Id")
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	status, body := get("summarizer", true)
	first := strings.Index(body, "event: delta")
	if status != 200 || first < 0 || !strings.HasPrefix(body, ": keep-alive\n\n") ||
		strings.Count(body[:first], ": keep-alive\n\n") < 2 || strings.Contains(body[first:], "keep-alive") ||
		!strings.Contains(body, "event: done") {
		t.Fatalf("SSE with a slow first piece: %d %q", status, body)
	}
	if status, body := get("summarizer", false); status != 200 || body != "tok tok " {
		t.Fatalf("plain text: %d %q, want the text alone", status, body)
	}
	if b := e.balance(acct.ID); b.Balance != 8 {
		t.Fatalf("balance %+v after two generations", b)
	}

	status, body = get("email-writer", true)
	if status != 200 || !strings.HasPrefix(body, ": keep-alive\n\n") || !strings.Contains(body, "event: error") ||
		strings.Contains(body, "event: done") || strings.Contains(body, "event: delta") {
		t.Fatalf("SSE whose first piece never comes: %d %q", status, body)
	}
	if want := `"request_id":"` + rid + `"`; rid == "" || !strings.Contains(body, want) {
		t.Fatalf("SSE error event %q, want the request's id (%s) as every error has it", body, want)
	}
	if b := e.balance(acct.ID); b.Balance != 8 || b.Available != 8 {
		t.Fatalf("balance %+v: the generation without text was charged", b)
	}
	e.verify()
}
