package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ollama/ollama/api"
)

// The chat stream is read here rather than through api.Client.Chat, which the rest of this
// backend uses. Its stream loop (api/client.go, v0.17.4) allocates an 8 MB line buffer per
// request, decodes every line twice (once for an "error" field, once into api.ChatResponse,
// whose Message decodes a third time), ignores the scanner's error, and returns success when
// the body ends early: a dropped connection or a stream cut before "done":true would pass for
// a complete generation. The wire types are still the api package's.

// chatChunk is the part of an api.ChatResponse line that matters here, plus the "error" field
// Ollama sends instead of a chunk when generation fails mid-stream. Unknown fields (model,
// created_at, role) are skipped without allocating.
type chatChunk struct {
	Message struct {
		Content string `json:"content"`
	} `json:"message"`
	Done            bool   `json:"done"`
	DoneReason      string `json:"done_reason"`
	Error           string `json:"error"`
	PromptEvalCount int    `json:"prompt_eval_count"`
	EvalCount       int    `json:"eval_count"`
}

// Causes recorded when this backend, not the caller, ends a request.
var (
	errFirstPieceTimeout = errors.New("no first piece within the first-piece timeout")
	errIdleTimeout       = errors.New("no next piece within the idle timeout")
	errDeadline          = errors.New("request deadline exceeded")
	errEmitStopped       = errors.New("emit stopped the generation")
	errNoDone            = errors.New(`stream ended without "done":true`)
)

// Timer states for the watchdog of one request.
const (
	waitFirst int32 = iota
	waitNext
	emitting
)

func (o *Ollama) encodeChat(req Request) ([]byte, error) {
	if o.cfg.API == APIOpenAI {
		return encodeOpenAIChat(req)
	}
	body := ollamaChatRequest{Model: req.Model, Messages: chatMessages(req), Stream: true, KeepAlive: o.keepAlive}
	body.Options.NumPredict, body.Options.Temperature = req.MaxTokens, req.Temperature
	body.Options.NumCtx, body.Options.Seed = req.NumCtx, req.Seed
	return json.Marshal(&body)
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

// newDecoder is the decoder of one stream on the backend's wire.
func (o *Ollama) newDecoder() streamDecoder {
	if o.cfg.API == APIOpenAI {
		return &openaiStream{}
	}
	return ollamaLines{}
}

// ollamaChatRequest is the part of api.ChatRequest this backend sends, as a plain struct: an
// api.ChatRequest with its options in a map took twice the time and allocations to encode (a
// test checks both give the same JSON).
type ollamaChatRequest struct {
	Model     string        `json:"model"`
	Messages  []chatMessage `json:"messages"`
	Stream    bool          `json:"stream"`
	KeepAlive *api.Duration `json:"keep_alive,omitempty"`
	Options   struct {
		NumPredict  int      `json:"num_predict,omitempty"`
		Temperature *float64 `json:"temperature,omitempty"`
		NumCtx      int      `json:"num_ctx,omitempty"`
		Seed        *int     `json:"seed,omitempty"`
	} `json:"options"`
}

// chatBody is the encoded chat request of a generation's attempts. The first piece of text
// ends the need for it (no other attempt follows text), and generateOn drops it then, so that
// thousands of long streams do not each hold their prompt twice for minutes.
type chatBody struct{ raw []byte }

// generateOn runs one attempt on host h. Every failure is an *Error.
func (o *Ollama) generateOn(ctx context.Context, h *ollamaHost, req Request, chat *chatBody, emit Emit, start time.Time) (Stats, error) {
	stats := Stats{Host: h.name}
	firstTimeout := req.FirstPieceTimeout
	if firstTimeout <= 0 {
		firstTimeout = o.cfg.FirstPieceTimeout
	}
	idleTimeout := req.IdleTimeout
	if idleTimeout <= 0 {
		idleTimeout = o.cfg.IdleTimeout
	}

	// inner is cancelled, with a recorded cause, by the watchdog timer, the deadline, an emit
	// error, or the end of this attempt; cancelling it aborts the HTTP request, which closes
	// the connection, which makes Ollama stop generating.
	inner, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !req.Deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		inner, cancelDeadline = context.WithDeadlineCause(inner, req.Deadline, errDeadline)
		defer cancelDeadline()
	}

	// One timer per request serves as first-piece and idle watchdog; a piece costs one Reset.
	// While emit runs the timer re-arms itself instead of firing: a slow client is the
	// caller's business, not a stalled model.
	var state atomic.Int32
	var watchdog *time.Timer
	watchdog = time.AfterFunc(firstTimeout, func() {
		switch state.Load() {
		case waitFirst:
			cancel(errFirstPieceTimeout)
		case waitNext:
			cancel(errIdleTimeout)
		default:
			watchdog.Reset(idleTimeout)
		}
	})
	defer watchdog.Stop()

	fail := func(kind Kind, err error) (Stats, error) {
		return stats, &Error{Kind: kind, Host: h.name, Pieces: stats.Pieces, Err: err}
	}

	hreq, err := http.NewRequestWithContext(inner, http.MethodPost, h.chatURL, bytes.NewReader(chat.raw))
	if err != nil {
		return fail(KindInternal, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if o.cfg.API == APIOpenAI {
		hreq.Header.Set("Accept", "text/event-stream")
		o.authorize(hreq)
	} else {
		hreq.Header.Set("Accept", "application/x-ndjson")
	}
	hreq.Header.Set("User-Agent", "caddy-textgen")
	// Marks the POST as safe to resend when a kept-alive connection turns out to be closed by
	// the server before it read anything (net/http, and leanRoundTrip, then retry instead of
	// failing); a nil value is not sent on the wire.
	hreq.Header["X-Idempotency-Key"] = nil

	var resp *http.Response
	if h.lean != nil {
		resp, err = o.leanRoundTrip(h, hreq)
	} else {
		resp, err = o.client.Do(hreq)
	}
	if err != nil {
		if kind, cause, ok := stopped(ctx, inner, 0); ok {
			return fail(kind, cause)
		}
		s, e := fail(KindUnavailable, err)
		e.(*Error).RetryAfter = o.cfg.HealthInterval // when the health checker looks again
		return s, e
	}
	defer resp.Body.Close()
	resp.Request = nil // it holds the body

	if resp.StatusCode >= http.StatusBadRequest {
		kind, retry, serr := statusError(resp)
		if k, cause, ok := stopped(ctx, inner, 0); ok {
			return fail(k, cause)
		}
		s, e := fail(kind, serr)
		e.(*Error).RetryAfter = retry
		return s, e
	}

	lines := newLineReader(resp.Body)
	defer lines.release()
	// pending: pieces were emitted that req.Flush has not sent on yet. They go before any wait
	// for the server and before every return.
	pending := false
	flush := func() error {
		if !pending {
			return nil
		}
		pending = false
		state.Store(emitting)
		err := req.Flush()
		if stats.Pieces > 0 {
			watchdog.Reset(idleTimeout)
			state.Store(waitNext)
		}
		return err
	}
	var chunk chatChunk
	dec := o.newDecoder()
	for {
		if pending && !lines.hasLine() {
			if err := flush(); err != nil {
				cancel(errEmitStopped)
				return fail(KindCanceled, err)
			}
		}
		line, err := lines.next()
		switch {
		case err == nil:
			err = dec.decode(line, &chunk)
		case errors.Is(err, io.EOF) && dec.atEOF(&chunk):
			err = nil // the wire's end without its end marker, after a complete stream
		}
		if err != nil {
			_ = flush() // what came before the failure
			if k, cause, ok := stopped(ctx, inner, stats.Pieces); ok {
				return fail(k, cause)
			}
			if errors.Is(err, io.EOF) {
				err = errNoDone
			} else {
				err = fmt.Errorf("reading the model server's stream: %w", err)
			}
			if stats.Pieces > 0 {
				return fail(KindInterrupted, err)
			}
			return fail(KindUpstream, err)
		}
		if chunk.Error != "" {
			_ = flush()
			err := fmt.Errorf("%s: %s", o.cfg.API, chunk.Error)
			if stats.Pieces > 0 {
				return fail(KindInterrupted, err)
			}
			return fail(KindUpstream, err)
		}
		if piece := chunk.Message.Content; piece != "" {
			if stats.Pieces == 0 {
				stats.TimeToFirst = time.Since(start)
				chat.raw = nil
			}
			stats.Pieces++
			state.Store(emitting)
			if err := emit(piece); err != nil {
				cancel(errEmitStopped)
				return fail(KindCanceled, err)
			}
			pending = req.Flush != nil
		}
		if chunk.Done {
			if err := flush(); err != nil {
				cancel(errEmitStopped)
				return fail(KindCanceled, err)
			}
			stats.PromptTokens = chunk.PromptEvalCount
			stats.OutputTokens = chunk.EvalCount
			stats.DoneReason = chunk.DoneReason
			stats.Total = time.Since(start)
			// Read the (empty) rest so the connection can be reused; the watchdog still
			// bounds a server that keeps it open after "done".
			watchdog.Reset(idleTimeout)
			state.Store(waitNext)
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			return stats, nil
		}
		// Before the first piece the first-piece timeout keeps running; after it, any line
		// (an empty one too) shows the model is alive. Re-arm before leaving the emitting state
		// so the timer cannot fire on time spent in emit.
		if stats.Pieces > 0 {
			watchdog.Reset(idleTimeout)
			state.Store(waitNext)
		}
	}
}

// stopped reports whether the attempt ended because ctx or inner was cancelled, and with which
// kind: the caller's cancellation, a watchdog, or a deadline.
func stopped(ctx, inner context.Context, pieces int) (Kind, error, bool) {
	if inner.Err() == nil {
		return 0, nil, false
	}
	timeoutKind := KindTimeout
	if pieces > 0 {
		timeoutKind = KindInterrupted
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return timeoutKind, fmt.Errorf("generation deadline: %w", cause), true
		}
		return KindCanceled, fmt.Errorf("generation canceled: %w", cause), true
	}
	switch cause := context.Cause(inner); cause {
	case errFirstPieceTimeout:
		return KindTimeout, cause, true
	case errIdleTimeout:
		return KindInterrupted, cause, true
	case errDeadline:
		return timeoutKind, cause, true
	case errEmitStopped:
		return KindCanceled, cause, true
	default:
		return KindInternal, cause, true
	}
}

// statusError turns an HTTP error answer into a kind, a retry hint and an api.StatusError.
func statusError(resp *http.Response) (Kind, time.Duration, error) {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	se := api.StatusError{StatusCode: resp.StatusCode, Status: resp.Status}
	// Ollama: {"error": "..."}; OpenAI-compatible servers: {"error": {"message": "...", ...}}.
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	msg := ""
	if json.Unmarshal(raw, &body) == nil && len(body.Error) > 0 {
		msg = openaiErrorMessage(body.Error)
	}
	if msg != "" {
		se.ErrorMessage = msg
	} else {
		se.ErrorMessage = strings.TrimSpace(string(raw))
	}
	msg = strings.ToLower(msg)
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusTooManyRequests:
		retry := time.Second
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			retry = time.Duration(s) * time.Second
		}
		return KindOverloaded, retry, se
	// Ollama: 404 {"error":"model \"x\" not found, try pulling it first"}; vLLM: 404 "The model
	// `x` does not exist."; OpenAI: 404 code model_not_found. A 404 without such a JSON error
	// is a wrong URL, not a missing model.
	case strings.Contains(msg, "model") && (strings.Contains(msg, "not found") || strings.Contains(msg, "does not exist")):
		return KindModelMissing, 0, se
	default:
		return KindUpstream, 0, se
	}
}
