package caddymodule

import (
	"context"
	"net/http"

	"github.com/caddy-textgen/textgen/ledger"
)

// A door is one endpoint through which a generation is asked for: POST /api/v1/generate with
// its own JSON, text and events (generateDoor), or OpenAI's POST /api/v1/chat/completions
// (chatDoor, chat.go). A door reads the request into an ask and writes the answer in its shape;
// the stages between (the key, the limits, the admission, the hold, the stream, the charge) are
// the same for every door (handler.go, generate.go).
type door interface {
	// read reads and checks the request body into a (request.go for generateDoor).
	read(h *Handler, w http.ResponseWriter, r *http.Request, a *ask) *apiError
	// writeError answers a refusal e; remaining < 0: the key was not valid.
	writeError(w http.ResponseWriter, reqID string, e *apiError, remaining int64)
	// encoder is how g's text goes on the wire.
	encoder(g *generation) encoder
	// replayKept answers a retry (its Idempotency-Key used before) with the first request's kept
	// text; false: it answered nothing (idempotency.go).
	replayKept(g *generation, ctx context.Context, src keptSource, view keptView, rec ledger.IdempotencyRecord) bool
	// replay answers a retry of a charged request whose text is not kept.
	replay(g *generation, rec ledger.IdempotencyRecord)
}

// An encoder writes a generation's text in a door's shape (streaming.go writes it).
type encoder interface {
	// contentType is the answer's Content-Type.
	contentType() string
	// whole: the text is held and sent in one body once the model is done (a non-streaming
	// chat completion), not piece by piece.
	whole() bool
	// piece appends one piece of text as it goes on the wire; id is its SSE id (0: none).
	piece(dst []byte, id int, piece string) []byte
	// end appends what ends a complete answer (after the charge): SSE's done event, a chat
	// stream's last chunks; for whole, the body with the text.
	end(dst []byte, id int, x ending) []byte
	// fail appends what ends a started stream with e (SSE: its error event).
	fail(dst []byte, id int, e *apiError) []byte
}

// ending is what the end of a complete answer says.
type ending struct {
	requestID                  string
	creditsUsed, remaining     int64
	promptTokens, outputTokens int
	finishReason               string
	text                       string // whole encoders only
}

// generateDoor is POST /api/v1/generate: the body of request.go; the text plain, or SSE events
// delta, done and error; errors as {"error": {...}} (errors.go).
type generateDoor struct{}

func (generateDoor) read(h *Handler, w http.ResponseWriter, r *http.Request, a *ask) *apiError {
	return h.readRequest(w, r, a)
}

func (generateDoor) writeError(w http.ResponseWriter, reqID string, e *apiError, remaining int64) {
	writeError(w, reqID, e, remaining)
}

func (generateDoor) replayKept(g *generation, ctx context.Context, src keptSource, view keptView, rec ledger.IdempotencyRecord) bool {
	return replayKeptStream(g, ctx, src, view, rec)
}

func (generateDoor) replay(g *generation, rec ledger.IdempotencyRecord) { replayStatus(g, rec) }

func (generateDoor) encoder(g *generation) encoder {
	if g.ask.sse {
		return sseEncoder{}
	}
	return plainEncoder{}
}

// plainEncoder is the text as it is (text/plain): a broken stream is aborted, never ended.
type plainEncoder struct{}

func (plainEncoder) contentType() string                          { return "text/plain; charset=utf-8" }
func (plainEncoder) whole() bool                                  { return false }
func (plainEncoder) piece(dst []byte, _ int, piece string) []byte { return append(dst, piece...) }
func (plainEncoder) end(dst []byte, _ int, _ ending) []byte       { return dst }
func (plainEncoder) fail(dst []byte, _ int, _ *apiError) []byte   { return dst }

// sseEncoder is POST /api/v1/generate's server-sent events: delta, then done or error.
type sseEncoder struct{}

func (sseEncoder) contentType() string { return "text/event-stream" }
func (sseEncoder) whole() bool         { return false }
func (sseEncoder) piece(dst []byte, id int, piece string) []byte {
	return appendDelta(dst, id, piece)
}

func (sseEncoder) end(dst []byte, id int, x ending) []byte {
	return appendEvent(dst, id, "done", doneEvent{CreditsUsed: x.creditsUsed, CreditsRemaining: x.remaining, RequestID: x.requestID,
		OutputTokens: x.outputTokens, FinishReason: x.finishReason})
}

func (sseEncoder) fail(dst []byte, id int, e *apiError) []byte {
	return appendEvent(dst, id, "error", errorBody{Error: e})
}

// appendEvent appends one SSE event with a JSON payload, with its id unless id is 0.
func appendEvent(dst []byte, id int, name string, v any) []byte {
	data, _ := jsonMarshal(v)
	if id > 0 {
		dst = appendEventID(dst, id)
	}
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}
