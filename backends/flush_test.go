package backends_test

import (
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

// TestFlushBatches: with Request.Flush, pieces that arrive together are handed over with one
// flush, and a piece that arrives alone is flushed before the backend waits for the next: every
// emitted piece has been flushed before the next wait and before Generate returns. (On the
// OpenAI wire the blank line that ends each event must not pass for a next piece.)
func TestFlushBatches(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 64, Piece: "tok "})
		fs.Set(ollamatest.FaultConfig{Model: "paced", Pieces: 5, Piece: "tok ", Delay: 40 * time.Millisecond})
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{fs.URL}})
		run := func(model string) (emits, flushes, unflushedAtEnd int, gaps []int) {
			t.Helper()
			pending := 0
			req := backends.Request{Model: model, Prompt: "hi", Flush: func() error {
				flushes++
				gaps = append(gaps, pending)
				pending = 0
				return nil
			}}
			if _, err := o.Generate(testCtx(t), req, func(string) error { emits++; pending++; return nil }); err != nil {
				t.Fatal(err)
			}
			return emits, flushes, pending, gaps
		}
		emits, flushes, left, _ := run(ollamatest.DefaultModel)
		if emits != 64 || left != 0 || flushes < 1 || flushes >= 64 {
			t.Fatalf("64 pieces sent at once: %d emits, %d flushes, %d never flushed; want fewer flushes than pieces and none left", emits, flushes, left)
		}
		emits, flushes, left, gaps := run("paced")
		if emits != 5 || left != 0 || flushes != 5 {
			t.Fatalf("5 pieces 40 ms apart: %d emits, %d flushes (batches %v), %d never flushed; want each flushed before the next wait", emits, flushes, gaps, left)
		}
	})
}
