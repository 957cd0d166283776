package backends_test

import (
	"context"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"testing"

	"github.com/ollama/ollama/api"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

// BenchmarkChatRelay measures the backend's own cost per piece relayed: a fake Ollama that
// answers at once (the whole response rendered once, written in one go) streams many pieces per
// request, so the request's fixed cost is spread thin and what remains is reading, decoding and
// emitting a piece. The fake server runs in the same process; its cost per request is a few
// allocations, shared by all pieces.
//
// "openai" relays the same pieces from the same server's OpenAI-compatible endpoint.
// "official-client" relays the same stream through api.Client.Chat for comparison; the
// backend reads the stream itself (see attempt.go for why).
func BenchmarkChatRelay(b *testing.B) {
	for _, pieces := range []int{1000, 8} {
		fs := ollamatest.NewFaultServer(ollamatest.FaultConfig{Pieces: pieces, Piece: " word"})
		b.Cleanup(fs.Close)

		// "backend" is Ollama's wire; "openai" the same pieces from the same server's
		// OpenAI-compatible endpoint (server-sent events, walked like Ollama's lines).
		for _, w := range []struct{ name, api string }{{"backend", apiOllama}, {"openai", apiOpenAI}} {
			b.Run(w.name+"/pieces="+strconv.Itoa(pieces), func(b *testing.B) {
				o, err := backends.NewChat(backends.ChatConfig{Wire: wireOf(w.api), Hosts: []string{fs.URL}, Logger: zap.NewNop()})
				if err != nil {
					b.Fatal(err)
				}
				defer o.Close()
				req := backends.Request{Model: ollamatest.DefaultModel, System: "sys", Prompt: "hello"}
				var n int
				emit := func(p string) error { n += len(p); return nil }
				ctx := context.Background()
				runRelay(b, pieces, func() error {
					_, err := o.Generate(ctx, req, emit)
					return err
				})
			})
		}

		b.Run("official-client/pieces="+strconv.Itoa(pieces), func(b *testing.B) {
			u, _ := url.Parse(fs.URL)
			c := api.NewClient(u, http.DefaultClient)
			stream := true
			req := &api.ChatRequest{Model: ollamatest.DefaultModel, Stream: &stream,
				Messages: []api.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "hello"}}}
			var n int
			fn := func(r api.ChatResponse) error { n += len(r.Message.Content); return nil }
			ctx := context.Background()
			runRelay(b, pieces, func() error { return c.Chat(ctx, req, fn) })
		})
	}
}

func runRelay(b *testing.B, pieces int, generate func() error) {
	b.ReportAllocs()
	if err := generate(); err != nil { // warm the connection
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		if err := generate(); err != nil {
			b.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	total := float64(b.N) * float64(pieces)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/total, "ns/piece")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/total, "allocs/piece")
}
