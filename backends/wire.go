package backends

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// A wire is how a Chat's model servers are spoken to: the requests and answers that differ
// between Ollama's own API (ollama.go) and the OpenAI-compatible one (openai.go). Everything
// around it is the Chat's and the same on every wire: the hosts and their health, admission,
// failover before the first piece, the first-piece and idle watchdog, batching pieces into
// flushes, typed errors (statusError reads the error answers of both). A new wire is a file
// that implements it and a case in newWire.
//
// The methods on the path of a generation (encode, header, decoder) run once per request or
// attempt, never per piece; a piece costs only its decoder's decode.
type wire interface {
	// chatURL is the address of the chat endpoint of the host configured as raw, which
	// ParseOllamaHost read as u, or why the wire cannot use that host.
	chatURL(raw string, u *url.URL) (string, error)
	// encode is the body of req's streamed chat request.
	encode(req Request) ([]byte, error)
	// header sets what a chat request says beyond its JSON body: the stream format it
	// accepts, the key.
	header(h http.Header)
	// decoder is a decoder for one stream.
	decoder() streamDecoder
	// checkModels is the start-up check of every host of c (Chat.CheckModels): each is marked
	// up or down by whether it answers, and what is wrong is logged with how to fix it.
	checkModels(ctx context.Context, c *Chat, models []string, pull bool) error
	// probe checks that h answers at all (the health checker).
	probe(ctx context.Context, c *Chat, h *chatHost) error
	// window is model's context window as h reports it, or ErrWindowUnknown.
	window(ctx context.Context, c *Chat, h *chatHost, model string) (int, error)
	// count is how many tokens h makes of the system prompt system for model (count.go), or
	// ErrCountUnknown.
	count(ctx context.Context, c *Chat, h *chatHost, model, system string, numCtx int) (PromptCount, error)
}

// The wires a Chat can speak (ChatConfig.API).
const (
	APIOllama = "ollama" // Ollama's own /api/chat (NDJSON)
	APIOpenAI = "openai" // /v1/chat/completions (SSE), OpenAI-compatible servers
)

// newWire is the wire cfg.API names, set up with what of cfg it needs.
func newWire(cfg ChatConfig) (wire, error) {
	switch cfg.API {
	case APIOllama:
		return newOllamaWire(cfg)
	case APIOpenAI:
		return newOpenAIWire(cfg), nil
	default:
		return nil, fmt.Errorf("backend api: %q is neither %q nor %q", cfg.API, APIOllama, APIOpenAI)
	}
}

// streamDecoder reads one stream of a wire, line by line, into chunks.
type streamDecoder interface {
	// decode reads line into c, which it zeroes first; a line that carries nothing leaves it
	// empty.
	decode(line []byte, c *chatChunk) error
	// atEOF reports whether the body's end completes the stream, making c its last chunk;
	// false: the stream was cut.
	atEOF(c *chatChunk) bool
}

// chatMessage is one message of a chat request, the same on both wires.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatMessages are req's system message (if any) and its prompt.
func chatMessages(req Request) []chatMessage {
	if req.System == "" {
		return []chatMessage{{Role: "user", Content: req.Prompt}}
	}
	return []chatMessage{{Role: "system", Content: req.System}, {Role: "user", Content: req.Prompt}}
}
