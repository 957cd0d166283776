// Package backends turns a prepared prompt into a stream of text pieces from a model server.
// It imports nothing from Caddy. Chat (chat.go) is the backend of model servers that stream chat
// completions over HTTP, on Ollama's wire (ollama.go) or the OpenAI-compatible one (openai.go),
// each a wire (wire.go).
package backends

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Request is one generation.
type Request struct {
	Model       string
	System      string   // system prompt
	Prompt      string   // the user message
	Temperature *float64 // nil: the model's default
	MaxTokens   int      // maximum output tokens (num_predict); 0: backend default
	NumCtx      int      // context size; 0: backend default
	Seed        *int     // sampling seed (the same seed and request give the same text); nil: random
	// FirstPieceTimeout bounds the wait for the first piece; 0: the backend's configured default.
	FirstPieceTimeout time.Duration
	// IdleTimeout bounds the wait between two pieces; 0: the backend's configured default.
	IdleTimeout time.Duration
	// Deadline bounds the whole generation; zero: none beyond ctx.
	Deadline time.Time
	// Admission is a place taken beforehand with the same backend's Admit (see Admitter);
	// Generate starts there and releases it. Nil: Generate admits the request itself.
	Admission Admission
	// Flush, when set, lets the backend hand over pieces in batches: emit then need not send a
	// piece on at once, and the backend calls Flush as soon as it holds no further piece (before
	// it waits for the model server, and before Generate returns), so no piece is held back
	// longer than it takes to hand over the pieces that arrived with it. An error from Flush
	// stops the generation as an error from emit does.
	Flush func() error
	// Format asks for the answer as JSON (OpenAI's response_format json_object or json_schema);
	// nil: text. Only a wire that takes it gets it (FormatTaker).
	Format *Format
}

// Format is an answer in JSON: any JSON object, or one that follows Schema.
type Format struct {
	// Schema is the JSON schema the answer follows (json_schema); nil: any JSON object.
	Schema json.RawMessage
	// Name and Strict are the json_schema's, for servers that take them (OpenAI-compatible).
	Name   string
	Strict *bool
}

// FormatTaker says whether model servers hand a Request's Format on to the model (Ollama's
// format, OpenAI's response_format); a server that does not would answer in plain text.
type FormatTaker interface {
	TakesFormat() bool
}

// FormatWire is a Wire that sends a Request's Format (its Encode reads it).
type FormatWire interface {
	Wire
	TakesFormat() bool
}

// Stats describe a finished generation.
type Stats struct {
	Host         string        `json:"host"`
	PromptTokens int           `json:"prompt_tokens"`
	OutputTokens int           `json:"output_tokens"`
	TimeToFirst  time.Duration `json:"time_to_first"`
	Total        time.Duration `json:"total"`
	DoneReason   string        `json:"done_reason"` // "stop", "length", ...
	Pieces       int           `json:"pieces"`
}

// Emit receives one piece of text. Returning an error stops the generation (and cancels it on
// the model server); Generate then returns that error wrapped as KindCanceled.
type Emit func(piece string) error

// Backend streams a generation. Generate calls emit for every piece in order, from the calling
// goroutine, and returns when the generation is complete (nil error, Stats filled) or failed
// (an *Error). Cancelling ctx stops the generation on the model server.
type Backend interface {
	Generate(ctx context.Context, req Request, emit Emit) (Stats, error)
}

// Admission is a place on a model server that a backend promised a generation before it
// starts.
type Admission interface {
	// Waited is how long the request waited for its place (0: it was not queued).
	Waited() time.Duration
	// Release gives the place back; Generate releases the admission it is given, so a caller
	// releases only one it did not pass on. Safe more than once.
	Release()
}

// Admitter is a Backend that limits the generations it runs at once and lets a caller take a
// place before it does anything costly for the request (the HTTP layer reserves a credit only
// once the request is admitted). Admit fails with an *Error: KindOverloaded (every place taken
// and the queue full, or the wait too long), KindUnavailable (no healthy host) or KindCanceled
// (ctx ended while waiting).
type Admitter interface {
	Backend
	Admit(ctx context.Context) (Admission, error)
}

// ModelServers is a set of model servers as the HTTP layer uses them (caddymodule depends on
// this, not on a concrete type): it generates with admission, a place held across instances
// too (HeldAdmitter), checks at start-up that the servers have the models (ModelChecker), tells
// its hosts' state for readiness (HostReporter), a model's context window (WindowFinder) and
// how many tokens a system prompt takes (SystemCounter).
// Close stops what runs in the background; generations in progress go on. Chat is one, for
// every server that streams chat completions over HTTP (chat.go).
type ModelServers interface {
	HeldAdmitter
	ModelChecker
	HostReporter
	WindowFinder
	SystemCounter
	FormatTaker
	io.Closer
}

// ModelChecker is the start-up check of a set of model servers.
type ModelChecker interface {
	// CheckModels asks every host whether it has models, marks it up or down by whether it
	// answers, logs what is wrong with how to fix it, and with pull fetches a missing model where
	// the server can. It returns nil when every host answers and has every model, else one
	// error listing what is wrong; a host may come up later, so the caller decides whether that
	// stops the start-up.
	CheckModels(ctx context.Context, models []string, pull bool) error
}

// HostReporter tells the state of a set of model servers from memory (the health checker's
// last findings), cheaply enough for a readiness endpoint that is polled often.
type HostReporter interface {
	// Hosts is every host's state, in configuration order.
	Hosts() []HostStatus
	// QueueLen is the number of requests waiting for admission.
	QueueLen() int
}

// WindowFinder tells a model's context window: the most tokens its prompt and answer may take
// together (window.go).
type WindowFinder interface {
	// KnownWindow is the window found earlier for model, if any; it asks no server.
	KnownWindow(model string) (int, bool)
	// ContextWindow finds model's window, asking the servers unless it is known. The error
	// wraps ErrWindowUnknown when no server reports it (a setting must say it then), else says
	// why none could be asked.
	ContextWindow(ctx context.Context, model string) (int, error)
}

// SystemCounter tells how many tokens a model makes of a system prompt (count.go).
type SystemCounter interface {
	// CountSystem asks the model servers for the tokens of system with model, run with a
	// context of numCtx tokens (0: the server's default). The error wraps ErrCountUnknown when
	// no server can count, else says why none could be asked.
	CountSystem(ctx context.Context, model, system string, numCtx int) (PromptCount, error)
}

// Kind classifies a backend failure so the HTTP layer can map it to a status code.
type Kind int

const (
	KindInternal     Kind = iota // a bug or an unexpected local error
	KindUnavailable              // cannot connect to any host
	KindOverloaded               // the model server's queue is full (Ollama's 503)
	KindTimeout                  // no first piece in time
	KindModelMissing             // the model is not on the server
	KindUpstream                 // the model server answered with an error before the first piece
	KindInterrupted              // an error after pieces were sent (error line, idle timeout, dropped connection)
	KindCanceled                 // ctx was cancelled or emit returned an error
	// KindTooLong: the prompt does not fit the model's context: the server refused it (an
	// OpenAI-compatible server's 400 "maximum context length"), or the caller found that the
	// server cut it or ran out of context while answering.
	KindTooLong
)

func (k Kind) String() string {
	switch k {
	case KindUnavailable:
		return "unavailable"
	case KindOverloaded:
		return "overloaded"
	case KindTimeout:
		return "timeout"
	case KindModelMissing:
		return "model_missing"
	case KindUpstream:
		return "upstream"
	case KindInterrupted:
		return "interrupted"
	case KindCanceled:
		return "canceled"
	case KindTooLong:
		return "too_long"
	default:
		return "internal"
	}
}

// Error is the typed error of Generate.
type Error struct {
	Kind   Kind
	Host   string
	Pieces int // pieces emitted before the failure
	// RetryAfter is a hint for overloaded/unavailable, 0 if none.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Host != "" {
		return fmt.Sprintf("backend %s: %s: %v", e.Host, e.Kind, e.Err)
	}
	return fmt.Sprintf("backend: %s: %v", e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of err, KindInternal if it is not an *Error.
func KindOf(err error) Kind {
	var be *Error
	if errors.As(err, &be) {
		return be.Kind
	}
	return KindInternal
}
