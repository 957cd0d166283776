package backends

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
)

// apiChatRequest encodes req the way the Ollama wire's encode did before it had a struct of its own: through
// the ollama api package's ChatRequest, options in a map. Both must say the same to Ollama.
func apiChatRequest(t *testing.T, req Request, keepAlive *api.Duration) []byte {
	stream := true
	opts := map[string]any{}
	if req.MaxTokens > 0 {
		opts["num_predict"] = req.MaxTokens
	}
	if req.Temperature != nil {
		opts["temperature"] = *req.Temperature
	}
	if req.NumCtx > 0 {
		opts["num_ctx"] = req.NumCtx
	}
	if req.Seed != nil {
		opts["seed"] = *req.Seed
	}
	var msgs []api.Message
	if req.System != "" {
		msgs = append(msgs, api.Message{Role: "system", Content: req.System})
	}
	msgs = append(msgs, api.Message{Role: "user", Content: req.Prompt})
	b, err := json.Marshal(&api.ChatRequest{Model: req.Model, Messages: msgs, Stream: &stream, KeepAlive: keepAlive, Options: opts,
		Truncate: &noCut, Shift: &noCut})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodeChatMatchesAPIChatRequest(t *testing.T) {
	temp, seed := 0.7, 42
	zeroTemp, zeroSeed := 0.0, 0
	ka := &api.Duration{Duration: 5 * time.Minute}
	for _, tc := range []struct {
		name      string
		req       Request
		keepAlive *api.Duration
	}{
		{"bare", Request{Model: "tiny", Prompt: "Write it."}, nil},
		{"everything", Request{Model: "llama3.2:1b", System: "You write.", Prompt: "Ünïcødé \"quotes\" \\ <html> \u2028 \x01 and\nnewlines",
			MaxTokens: 256, Temperature: &temp, NumCtx: 4096, Seed: &seed}, ka},
		{"zeros that count", Request{Model: "m", Prompt: "p", Temperature: &zeroTemp, Seed: &zeroSeed}, nil},
		{"invalid UTF-8", Request{Model: "m", Prompt: "a\xffb"}, &api.Duration{Duration: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ow := &ollamaWire{keepAlive: tc.keepAlive}
			got, err := ow.Encode(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			want := apiChatRequest(t, tc.req, tc.keepAlive)
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("%s: %v", got, err)
			}
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("ollamaWire.encode:\n%s\napi.ChatRequest:\n%s", got, want)
			}
		})
	}
}

func BenchmarkEncodeChat(b *testing.B) {
	temp := 0.7
	req := Request{Model: "llama3.2:1b", System: "You are a writing assistant.", Prompt: "Write a short e-mail to a customer about a late delivery.", MaxTokens: 256, Temperature: &temp}
	w := &ollamaWire{}
	b.Run("struct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w.Encode(req)
		}
	})
	b.Run("api.ChatRequest", func(b *testing.B) {
		b.ReportAllocs()
		t := &testing.T{}
		for b.Loop() {
			apiChatRequest(t, req, nil)
		}
	})
}
