package caddymodule

// A client that reads slowly, or not at all, keeps its own account's place and hold while it
// reads, but never a model's place longer than the model works for it.

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger"
)

// TestStalledReadersFreeTheModel: four streams of one account whose clients never read (each
// answer, 192 KiB at once, is more than the server's socket takes from such a client) would keep
// every place of a host with max_in_flight 4 until write_timeout (here 10 minutes), and another
// account's request would be answered 503 overloaded after queue_timeout. The model is done with
// them at once: its places go back while the stalled clients are still connected, the other
// account is served, and the stalled text waits for its readers (the kept text, or the bounded
// buffer with retention off). Once they leave, each is charged once (text reached them), and with
// retention every answer can be fetched whole.
func TestStalledReadersFreeTheModel(t *testing.T) {
	for _, tc := range []struct{ name, extra string }{
		{"retention off", "retention off"},
		{"retention on", "retention_key " + testRetentionKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const pieces = 48
			piece := strings.Repeat("x", 4096)
			fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: pieces, Piece: piece})
			fs.Set(ollamatest.FaultConfig{Model: "short", Pieces: 3, Piece: "tok "})
			e := newEnv(t, envOptions{ollama: fs.URL, limits: "default", global: "servers {\n\t\ttimeouts {\n\t\t\twrite_idle -1s\n\t\t}\n\t}", extra: `write_timeout 10m
		generation_timeout 10m
		hold_ttl 20m
		max_in_flight 4
		queue_size 8
		queue_timeout 5s
		max_concurrent_per_account 8
		rate_limit key off
		rate_limit account off
		tool email-writer {
			model short
		}
		` + tc.extra})
			slow, slowKey := e.account(10)
			other, otherKey := e.account(5)

			var closers []func()
			for range 4 {
				status, closeConn := stalledReaderSegments(t, slowKey, genBody("summarizer", "x", "en", ""), 536)
				t.Cleanup(closeConn)
				closers = append(closers, closeConn)
				if status != http.StatusOK {
					t.Fatalf("a stalled stream: status %d", status)
				}
			}
			waitFor(t, "the model to have answered the four", func() bool { return fs.Requests() == 4 && fs.InFlight() == 0 })

			// The model is done: its places are free for the other account.
			resp, err := e.post(context.Background(), otherKey, genBody("email-writer", "x", "en", ""))
			if err != nil {
				t.Fatal(err)
			}
			text, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(text) != "tok tok tok " {
				t.Fatalf("the other account, while four stalled streams hold a host of four places: %d %q, want 200 and its text", resp.StatusCode, text)
			}
			// The stalled streams are still there: their credits are held, not yet settled.
			if b := e.balance(slow.ID); b.Balance != 10 || b.Available != 6 {
				t.Fatalf("stalled account %+v, want 4 credits held while its clients are connected", b)
			}

			for _, c := range closers {
				c()
			}
			waitFor(t, "the four stalled streams to be settled", func() bool { return e.count(slow.ID, ledger.KindSettle) == 4 })
			if b := e.balance(slow.ID); b.Balance != 6 || b.Available != 6 {
				t.Errorf("stalled account %+v, want 6: each stalled stream had text and is charged once", b)
			}
			if b := e.balance(other.ID); b.Balance != 4 {
				t.Errorf("other account %+v, want 4", b)
			}
			if tc.name == "retention on" {
				for _, en := range e.entries(slow.ID) {
					if en.Kind != ledger.KindSettle {
						continue
					}
					var got string
					waitFor(t, "the kept text", func() bool {
						r, body := e.getText(slowKey, "/api/v1/generations/"+en.RequestID, "Accept", "text/plain")
						got = body
						return r.StatusCode == http.StatusOK
					})
					if got != strings.Repeat(piece, pieces) {
						t.Errorf("kept text of %s: %d bytes, want %d", en.RequestID, len(got), pieces*len(piece))
					}
				}
			}
			e.verify()
		})
	}
}
