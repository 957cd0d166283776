package backends

import (
	"context"
	"net/http"
	"net/url"

	"go.uber.org/zap"
)

// A Wire is how a Chat's model servers are spoken to: the requests and answers that differ
// between Ollama's own API (OllamaWire, ollama.go), the OpenAI-compatible one (OpenAIWire,
// openai.go) and any other that streams chat completions over HTTP. Everything around it is the
// Chat's and the same on every wire: the hosts and their health, admission, failover before the
// first piece, the first-piece and idle watchdog, batching pieces into flushes, typed errors
// (an error answer's status and message are read the same way for every wire: attempt.go
// statusError). A new wire is a type in any package that implements Wire, given to NewChat in
// ChatConfig.Wire.
//
// The methods on the path of a generation (Encode, Header, Decoder) run once per request or
// attempt, never per piece; a piece costs only its decoder's Decode. A Wire is used by many
// goroutines at once and must not change after NewChat.
type Wire interface {
	// ChatURL is the address of the chat endpoint of the host configured as raw, which
	// ParseOllamaHost read as base, or why the wire cannot use that host.
	ChatURL(raw string, base *url.URL) (string, error)
	// Encode is the JSON body of req's streamed chat request.
	Encode(req Request) ([]byte, error)
	// Header sets what a chat request says beyond its JSON body (Content-Type is set): the
	// stream format it accepts, a key.
	Header(h http.Header)
	// Decoder is a decoder for one stream.
	Decoder() StreamDecoder
	// CheckModels is the start-up check of h (Chat.CheckModels): whether it answers and serves
	// every model in models, or, with pull, fetches those it lacks (a wire that cannot pull
	// reports them). It logs what is wrong with how to fix it (h.Log) and returns it as an
	// error; a host that does not answer at all is reported with a *NoAnswerError in the
	// error's chain, and the Chat marks it down until it answers.
	CheckModels(ctx context.Context, h Host, models []string, pull bool) error
	// Probe checks that h answers at all (the health checker, every HealthInterval).
	Probe(ctx context.Context, h Host) error
	// Window is model's context window as h reports it, or ErrWindowUnknown (window.go).
	Window(ctx context.Context, h Host, model string) (int, error)
	// Count is how many tokens h makes of the system prompt system for model, run with a
	// context of numCtx tokens (0: the server's default), or ErrCountUnknown (count.go).
	Count(ctx context.Context, h Host, model, system string, numCtx int) (PromptCount, error)
}

// Host is one model server as a Wire sees it.
type Host struct {
	// Name is the host's URL as logs, errors and HostStatus give it.
	Name string
	// Base is the host as ParseOllamaHost read it; the wire's addresses are under it.
	Base *url.URL
	// Client is the Chat's HTTP client (its connect timeout, proxy and idle connections), for
	// every request but the chat stream.
	Client *http.Client
	// Log is the Chat's logger (ChatConfig.Logger).
	Log *zap.Logger
}

// NoAnswerError is a host's failure to answer at all, as a Wire's CheckModels reports it: the
// Chat marks the host down with Err until a probe finds it up.
type NoAnswerError struct{ Err error }

func (e *NoAnswerError) Error() string { return e.Err.Error() }
func (e *NoAnswerError) Unwrap() error { return e.Err }

// StreamDecoder reads one stream of a wire, line by line, into chunks.
type StreamDecoder interface {
	// Decode reads line into c, which it zeroes first; a line that carries nothing leaves it
	// empty. The line is valid only until Decode returns.
	Decode(line []byte, c *Chunk) error
	// AtEOF reports whether the body's end completes the stream, making c its last chunk;
	// false: the stream was cut.
	AtEOF(c *Chunk) bool
}

// Chunk is what one line of a stream says: a piece of text, the end with its counts, or the
// model server's error. Ollama's NDJSON lines are decoded into it field by field.
type Chunk struct {
	// Message.Content is a piece of the answer; empty: none in this line.
	Message struct {
		Content string `json:"content"`
	} `json:"message"`
	// Done marks the stream's last chunk, with DoneReason ("stop", "length", ...) and the
	// prompt's and the answer's tokens as the server counted them.
	Done            bool   `json:"done"`
	DoneReason      string `json:"done_reason"`
	PromptEvalCount int    `json:"prompt_eval_count"`
	EvalCount       int    `json:"eval_count"`
	// Error is the model server's error, sent instead of a piece when generation fails
	// mid-stream.
	Error string `json:"error"`
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
