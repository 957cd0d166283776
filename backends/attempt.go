package backends

import (
	"bytes"
	"cmp"
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

// The chat stream is read here rather than through api.Client.Chat, which the rest of the
// Ollama wire uses (ollama.go). Its stream loop (api/client.go, v0.17.4) allocates an 8 MB line
// buffer per request, decodes every line twice (once for an "error" field, once into api.ChatResponse,
// whose Message decodes a third time), ignores the scanner's error, and returns success when
// the body ends early: a dropped connection or a stream cut before "done":true would pass for
// a complete generation. The wire types are still the api package's.

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

// chatBody is the encoded chat request of a generation's attempts. The first piece of text
// ends the need for it (no other attempt follows text), and generateOn drops it then, so that
// thousands of long streams do not each hold their prompt twice for minutes.
type chatBody struct{ raw []byte }

// generateOn runs one attempt on host h. Every failure is an *Error.
//
// A stream spends its minutes in here, waiting for the model's next piece on the stack of the
// connection goroutine that serves the request. Go grows a goroutine's stack by doubling and
// keeps it at its largest, and the deepest moment of a request is its first flush (net/http
// writes the response headers), under this frame: so this frame is kept small. The request's
// set-up (open), the state of the attempt (an attempt on the heap) and every way it ends are
// functions of their own, not inlined here, and it defers one call. In a site with textgen in
// a handle block behind encode and a log, that keeps a stream on a 16 KiB stack instead of 32
// (caddymodule's TestStreamStack); Generate and the handler's run are kept small alike.
func (c *Chat) generateOn(ctx context.Context, h *chatHost, req *Request, chat *chatBody, emit Emit, start time.Time) (Stats, error) {
	a := c.newAttempt(h, req)
	err := a.run(ctx, c, req, chat, emit, start)
	return a.stats, err
}

// run is the attempt: open the stream, emit its pieces, end by how it ends.
func (a *attempt) run(ctx context.Context, c *Chat, req *Request, chat *chatBody, emit Emit, start time.Time) error {
	defer a.end() // one deferred call: more would each take a record in this frame
	h := a.h
	// inner is cancelled, with a recorded cause, by the watchdog timer, the deadline, an emit
	// error, or the end of this attempt; cancelling it aborts the HTTP request, which closes
	// the connection, which makes Ollama stop generating.
	inner, cancel := context.WithCancelCause(ctx)
	a.cancel = cancel
	if !req.Deadline.IsZero() {
		inner, a.cancelDeadline = context.WithDeadlineCause(inner, req.Deadline, errDeadline)
	}
	a.watchdog = time.AfterFunc(a.firstTimeout, a.watch)

	resp, err := c.open(ctx, inner, h, chat)
	if err != nil {
		return err
	}
	a.body = resp.Body
	lines := newLineReader(resp.Body)
	a.lines = lines
	dec := c.wire.Decoder()
	for {
		// Pieces emitted and not yet flushed go before any wait for the server.
		if a.pending && !lines.hasLine() {
			if err := a.deliver(); err != nil {
				return a.clientStopped(err)
			}
		}
		line, err := lines.next()
		switch {
		case err == nil:
			err = dec.Decode(line, &a.chunk)
		case errors.Is(err, io.EOF) && dec.AtEOF(&a.chunk):
			err = nil // the wire's end without its end marker, after a complete stream
		}
		if err != nil {
			return a.readFailed(ctx, inner, err)
		}
		if a.chunk.Error != "" {
			return a.modelFailed()
		}
		if piece := a.chunk.Message.Content; piece != "" {
			if a.stats.Pieces == 0 {
				a.stats.TimeToFirst = time.Since(start)
				chat.raw = nil
			}
			a.stats.Pieces++
			a.state.Store(emitting)
			if err := emit(piece); err != nil {
				return a.clientStopped(err)
			}
			a.pending = a.flush != nil
		}
		if a.chunk.Done {
			return a.done(resp.Body, start)
		}
		// Before the first piece the first-piece timeout keeps running; after it, any line
		// (an empty one too) shows the model is alive. Re-arm before leaving the emitting state
		// so the timer cannot fire on time spent in emit.
		a.alive()
	}
}

// attempt is the state of one attempt (generateOn): what it streamed, its watchdog and how to
// cancel it.
type attempt struct {
	h     *chatHost
	flush func() error // Request.Flush
	stats Stats
	chunk Chunk // the line just read
	// pending: pieces were emitted that flush has not sent on yet. They go before any wait
	// for the server and before every return.
	pending bool

	cancel         context.CancelCauseFunc
	cancelDeadline context.CancelFunc // nil: no deadline of the request's own
	body           io.Closer          // the stream's body, once open
	lines          *lineReader        // its line reader
	// One timer per request serves as first-piece and idle watchdog; a piece costs one Reset.
	// While emit runs the timer re-arms itself instead of firing: a slow client is the
	// caller's business, not a stalled model.
	watchdog     *time.Timer
	state        atomic.Int32
	firstTimeout time.Duration
	idleTimeout  time.Duration
}

//go:noinline
func (c *Chat) newAttempt(h *chatHost, req *Request) *attempt {
	return &attempt{h: h, flush: req.Flush, stats: Stats{Host: h.name},
		firstTimeout: cmp.Or(max(req.FirstPieceTimeout, 0), c.cfg.FirstPieceTimeout),
		idleTimeout:  cmp.Or(max(req.IdleTimeout, 0), c.cfg.IdleTimeout)}
}

// end releases what the attempt holds, the last thing it took first.
func (a *attempt) end() {
	if a.lines != nil {
		a.lines.release()
	}
	if a.body != nil {
		a.body.Close()
	}
	if a.watchdog != nil {
		a.watchdog.Stop()
	}
	if a.cancelDeadline != nil {
		a.cancelDeadline()
	}
	if a.cancel != nil {
		a.cancel(nil)
	}
}

// watch is the watchdog's callback.
func (a *attempt) watch() {
	switch a.state.Load() {
	case waitFirst:
		a.cancel(errFirstPieceTimeout)
	case waitNext:
		a.cancel(errIdleTimeout)
	default:
		a.watchdog.Reset(a.idleTimeout)
	}
}

// alive re-arms the idle watchdog once text has come.
func (a *attempt) alive() {
	if a.stats.Pieces > 0 {
		a.watchdog.Reset(a.idleTimeout)
		a.state.Store(waitNext)
	}
}

// deliver hands the pending pieces on (Request.Flush).
//
//go:noinline
func (a *attempt) deliver() error {
	if !a.pending {
		return nil
	}
	a.pending = false
	a.state.Store(emitting)
	err := a.flush()
	a.alive()
	return err
}

// fail is the attempt's end as an *Error of kind.
//
//go:noinline
func (a *attempt) fail(kind Kind, err error) error {
	return &Error{Kind: kind, Host: a.h.name, Pieces: a.stats.Pieces, Err: err}
}

// clientStopped ends the attempt whose emit or flush failed (the client is gone): the model
// server is told by the cancellation.
//
//go:noinline
func (a *attempt) clientStopped(err error) error {
	a.cancel(errEmitStopped)
	return a.fail(KindCanceled, err)
}

// readFailed ends the attempt whose stream could not be read on (err), after flushing what
// came before: by its cause when the attempt was stopped, else as a cut stream.
//
//go:noinline
func (a *attempt) readFailed(ctx, inner context.Context, err error) error {
	_ = a.deliver() // what came before the failure
	if k, cause, ok := stopped(ctx, inner, a.stats.Pieces); ok {
		return a.fail(k, cause)
	}
	if errors.Is(err, io.EOF) {
		return a.cut(errNoDone)
	}
	return a.cut(fmt.Errorf("reading the model server's stream: %w", err))
}

// modelFailed ends the attempt whose model server reported an error in its stream.
//
//go:noinline
func (a *attempt) modelFailed() error {
	_ = a.deliver()
	return a.cut(fmt.Errorf("model server: %s", a.chunk.Error))
}

// cut is the end of an attempt whose stream broke off: interrupted once text went out, else
// the model server's failure.
func (a *attempt) cut(err error) error {
	if a.stats.Pieces > 0 {
		return a.fail(KindInterrupted, err)
	}
	return a.fail(KindUpstream, err)
}

// done ends the attempt whose stream is complete: the pending pieces go, the counts are taken,
// and the (empty) rest of body is read so that its connection can be reused (the watchdog
// still bounds a server that keeps it open after "done").
//
//go:noinline
func (a *attempt) done(body io.Reader, start time.Time) error {
	if err := a.deliver(); err != nil {
		return a.clientStopped(err)
	}
	a.stats.PromptTokens = a.chunk.PromptEvalCount
	a.stats.OutputTokens = a.chunk.EvalCount
	a.stats.DoneReason = a.chunk.DoneReason
	a.stats.Total = time.Since(start)
	a.watchdog.Reset(a.idleTimeout)
	a.state.Store(waitNext)
	io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	return nil
}

// open sends an attempt's chat request to h and returns the answer once it is a stream, or an
// *Error (no piece was emitted yet). It is a function of its own so that what it needs
// (net/http's request, the error paths) is not part of generateOn's frame, which waits on a
// connection goroutine's stack for as long as the model streams.
//
//go:noinline
func (c *Chat) open(ctx, inner context.Context, h *chatHost, chat *chatBody) (*http.Response, error) {
	fail := func(kind Kind, err error, retry time.Duration) (*http.Response, error) {
		if k, cause, ok := stopped(ctx, inner, 0); ok {
			kind, err, retry = k, cause, 0
		}
		return nil, &Error{Kind: kind, Host: h.name, Err: err, RetryAfter: retry}
	}
	hreq, err := http.NewRequestWithContext(inner, http.MethodPost, h.chatURL, bytes.NewReader(chat.raw))
	if err != nil {
		return nil, &Error{Kind: KindInternal, Host: h.name, Err: err}
	}
	hreq.Header.Set("Content-Type", "application/json")
	c.wire.Header(hreq.Header)
	hreq.Header.Set("User-Agent", "caddy-textgen")
	// Marks the POST as safe to resend when a kept-alive connection turns out to be closed by
	// the server before it read anything (net/http, and leanRoundTrip, then retry instead of
	// failing); a nil value is not sent on the wire.
	hreq.Header["X-Idempotency-Key"] = nil

	var resp *http.Response
	if h.lean != nil {
		resp, err = c.leanRoundTrip(h, hreq)
	} else {
		resp, err = c.client.Do(hreq)
	}
	if err != nil {
		return fail(KindUnavailable, err, c.cfg.HealthInterval) // when the health checker looks again
	}
	resp.Request = nil // it holds the body
	if resp.StatusCode >= http.StatusBadRequest {
		kind, retry, serr := statusError(resp)
		resp.Body.Close()
		return fail(kind, serr, retry)
	}
	return resp, nil
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
	case tooLong(resp.StatusCode, msg, raw):
		return KindTooLong, 0, se
	default:
		return KindUpstream, 0, se
	}
}

// tooLong reports whether an error answer says the prompt does not fit the model's context:
// OpenAI's code context_length_exceeded, vLLM's "maximum context length is N tokens", llama.cpp
// server's "exceeds the available context size", Ollama's "the input length exceeds the
// context length" (with "truncate": false).
func tooLong(status int, msg string, raw []byte) bool {
	if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
		return false
	}
	if bytes.Contains(raw, []byte("context_length_exceeded")) || bytes.Contains(raw, []byte("exceed_context_size")) {
		return true
	}
	return strings.Contains(msg, "context") &&
		(strings.Contains(msg, "length") || strings.Contains(msg, "exceed") || strings.Contains(msg, "too long"))
}
