package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/pipeline"
	"github.com/caddy-textgen/textgen/ledger/jsonenc"
)

// wantsSSE reports whether the client asked for server-sent events.
func wantsSSE(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err == nil && mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// appendEventID appends an SSE event's id line.
func appendEventID(dst []byte, id int) []byte {
	return append(strconv.AppendInt(append(dst, "id: "...), int64(id), 10), '\n')
}

// appendDelta appends the SSE event of one piece of text, with its id unless id is 0.
func appendDelta(dst []byte, id int, piece string) []byte {
	if id > 0 {
		dst = appendEventID(dst, id)
	}
	dst = append(dst, "event: delta\ndata: {\"text\":"...)
	dst = jsonenc.AppendString(dst, piece) // U+2028 and U+2029 escaped too: JavaScript clients
	return append(dst, "}\n\n"...)
}

type doneEvent struct {
	CreditsUsed      int64  `json:"credits_used"`
	CreditsRemaining int64  `json:"credits_remaining"`
	RequestID        string `json:"request_id"`
	OutputTokens     int    `json:"output_tokens"`
	// FinishReason is why the answer ended: "stop" (the model finished it) or "length" (it
	// reached the tool's max_output_tokens).
	FinishReason string `json:"finish_reason"`
}

// streamBufferBytes bounds the text of one generation that waits for its client with
// retention off (with retention on, the kept text is what waits, bounded by keptMaxBytes). A
// tool's answer within its max_output_tokens is far shorter: in practice the whole answer waits,
// and the model's place goes back when the model is done; past the bound the model waits for
// the client, as write_timeout allows.
const streamBufferBytes = 256 << 10

// streamFlushBytes is the most text the writer writes between two flushes.
const streamFlushBytes = 16 << 10

// firstFlushBytes is the most text the first flush carries when the model had more than one
// piece ready: small beside any socket's send buffer, so that the first flush cannot wait on a
// client that does not read, and one write instead of two for a short answer that came at once.
const firstFlushBytes = 1 << 10

// streamer writes the pieces of one generation to the client.
//
// The model and the client each go at their own pace: emit queues a piece and a writer
// goroutine, started while pieces wait (kick) and gone once they are written, writes them to the
// client (the first text of an HTTP/1 stream, when small, kick writes itself). So
// a model that has sent its last piece gives its place back (Generate returns) while a slow
// client still reads the rest from what the server holds: the kept text, or the queue of at most
// streamBufferBytes with retention off (beyond it, emit waits for the writer). The handler waits
// for the writer (drain) before it settles.
//
// Every write has a deadline: WriteTimeout from its start, and never later than the end of the
// generation (the whole response). A client that stops reading (a stalled or deliberately slow
// reader whose socket buffers are full) would otherwise keep its account's place and its hold
// for as long as it likes; with the deadline the write fails, the generation stops (or, with
// retention, runs on without it), and the text it was sent is charged.
type streamer struct {
	// The client's side: its response, its request's context (ended: the client left), and
	// what the 200 headers carry.
	w         http.ResponseWriter
	client    context.Context
	http2     bool // HTTP/2 or later: deadlines must be cleared between writes (flushed)
	sse       bool // an event stream: keep-alive comments may go out before the text
	enc       encoder
	requestID string
	remaining int64
	// price is what a complete answer charges (the hold's price): its X-Credits-Used.
	price int64

	rc      *http.ResponseController
	timeout time.Duration // per write (WriteTimeout)
	end     time.Time     // the generation's deadline: no write outlives it
	armed   time.Time     // the write deadline set last (zero: none)
	started bool          // the 200 headers were written
	buf     []byte
	text    []byte             // a whole encoder's text, sent once the model is done (writeWhole)
	stop    context.CancelFunc // cancels the model call (a failed write that ends the generation)

	// mu orders the model's side (emit, flush), the writer, the keep-alives and clientLeft.
	mu sync.Mutex
	// moved is signalled when the writer has written a batch or stopped.
	moved   sync.Cond
	queue   []string // pieces emitted, not yet taken by the writer
	spare   []string // the writer's last batch, for the next queue
	queued  int      // bytes of the pieces emitted and not yet written
	limit   int      // the bound of queued
	writing bool     // a writer goroutine runs
	sent    int      // pieces the writer took: the SSE id of the last one
	texted  bool     // a piece of text was handed to the writer (started may be true before: keep-alives)
	// flushedOnce: the writer flushed text once; it is the writer's alone (one runs at a time,
	// started and ended under mu).
	flushedOnce bool
	writeErr    error
	// delivered: a piece reached the client's connection (a write and its flush succeeded);
	// only then may a client that leaves be charged.
	delivered bool

	// With retention on (kept != nil), every piece is kept, and a client that leaves after text
	// was delivered detaches the generation from the response: it runs to its end for the
	// followers and the ledger.
	kept     *keptText
	gone     bool // the request's context ended
	detached bool // no more writes: the generation goes on for kept alone
	n        int  // pieces emitted

	// kaStopped: SSE comments are sent until the first piece (startKeepAlive).
	kaStopped bool
}

// newStreamer prepares the stream of a generation to the client of w and r in enc's shape (an
// event stream if sse), each write bounded by writeTimeout and the whole stream by end; kept
// keeps its text (nil: retention off). The 200 headers carry requestID and the client's
// remaining credits.
func newStreamer(w http.ResponseWriter, r *http.Request, enc encoder, sse bool, requestID string, remaining int64,
	writeTimeout time.Duration, end time.Time, kept *keptText) *streamer {
	s := &streamer{w: w, client: r.Context(), http2: r.ProtoMajor >= 2, sse: sse, enc: enc, requestID: requestID, remaining: remaining,
		rc: http.NewResponseController(w), timeout: writeTimeout, end: end, stop: func() {}, limit: streamBufferBytes, kept: kept}
	s.moved.L = &s.mu
	if s.kept != nil {
		s.limit = keptMaxBytes // the kept text is what waits: no more than is kept
	}
	return s
}

// emit queues one piece for the writer (and keeps it, with retention on). It waits while more
// than the bound waits for a slow client. The first piece sends the 200 headers.
func (s *streamer) emit(piece string) error {
	kept := s.kept == nil || s.kept.add(piece)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.kept != nil && s.gone && s.delivered {
		s.detached = true
	}
	if s.detached {
		if !kept {
			return errKeptFull // nobody reads it any more
		}
		return nil
	}
	if err := s.failed(); err != nil || s.detached {
		return err
	}
	if s.enc.whole() {
		// Held until the model is done (writeWhole); max_output_tokens bounds it.
		s.text = append(s.text, piece...)
		s.texted = true
		return nil
	}
	s.queue = append(s.queue, piece)
	s.queued += len(piece)
	for s.queued > s.limit && s.writeErr == nil {
		s.kick()
		s.moved.Wait()
	}
	return s.failed()
}

// flush hands the queued pieces to the writer (backends.Request.Flush: the backend holds no
// further piece now). It never waits for a client that does not read (kick).
func (s *streamer) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kick()
	return s.failed()
}

// failed is the error that ends the generation after a failed write; none while the writes
// succeed, or once the generation has detached: with retention on, a client that had text
// leaves the generation to run on for the kept text. Called with mu held.
func (s *streamer) failed() error {
	if s.writeErr == nil || s.detached {
		return nil
	}
	if s.kept != nil && s.delivered {
		s.detached = true
		return nil
	}
	return s.writeErr
}

// kick starts the writer if pieces wait and none runs. Called with mu held.
//
// The stream's first text on an HTTP/1 connection, when it fits the first flush
// (firstFlushBytes), kick writes itself instead, on the model's goroutine: a connection that has
// had no text yet takes it into the socket's send buffer without waiting for its client to read
// (what went before, the headers or a keep-alive comment, is smaller still). The first byte then
// waits for no goroutine to be started and scheduled, and a short answer that came at once needs
// no writer at all. On HTTP/2 a write waits for the stream's flow-control window, which the
// client sets: the writer writes there from the first piece. (emit kicks only above its limit,
// far above firstFlushBytes, so it always gets the writer it then waits for.)
func (s *streamer) kick() {
	if s.writing || len(s.queue) == 0 || s.writeErr != nil || s.detached {
		return
	}
	s.writing, s.texted = true, true
	if s.http2 || s.flushedOnce || s.queued > firstFlushBytes {
		go s.writeQueued()
		return
	}
	s.writeRound()
	s.writing = false
	s.moved.Broadcast()
}

// writeQueued is the writer: it writes the queued pieces, a batch and one flush at a time, until
// none is left or a write fails. It alone writes while it runs.
func (s *streamer) writeQueued() {
	s.mu.Lock()
	for len(s.queue) > 0 && s.writeErr == nil && !s.detached {
		s.writeRound()
	}
	s.writing = false
	s.moved.Broadcast()
	s.mu.Unlock()
}

// writeRound writes the pieces queued now as one batch. Called with mu held by the one that
// writes (writing is set); mu is released while it writes.
func (s *streamer) writeRound() {
	batch, id := s.queue, s.sent
	s.queue, s.sent = s.spare[:0], s.sent+len(batch)
	s.mu.Unlock()
	bytes, err := s.writeBatch(batch, id)
	clear(batch) // the pieces are the kept text's or garbage, not the writer's
	s.mu.Lock()
	s.spare = batch
	s.queued -= bytes
	if err != nil {
		s.writeErr = err
		s.queue, s.queued = nil, 0
		if s.failed() != nil {
			s.stop() // the generation has no reader left: the model stops
		}
	}
	s.moved.Broadcast()
}

// writeBatch writes pieces, the first one's SSE id after id, and flushes them to the client
// before their text passes streamFlushBytes (firstFlushBytes for the first flush), so that
// what a client that stops reading got is known (delivered) to about that much. It returns
// their bytes.
func (s *streamer) writeBatch(pieces []string, id int) (int, error) {
	n, unflushed := 0, 0
	for i, p := range pieces {
		id++
		n += len(p)
		unflushed += len(p)
		if err := s.write(p, id); err != nil {
			return n, err
		}
		// A flush carries the pieces ready with it up to a bound, a larger piece alone. The first
		// flush's bound is small: the first byte is not kept waiting for text still to come,
		// and a client that then stops reading has certainly got it (a first flush of much text
		// could block on the client's window and never be delivered).
		bound := streamFlushBytes
		if !s.flushedOnce {
			bound = firstFlushBytes
		}
		if i < len(pieces)-1 && unflushed+len(pieces[i+1]) <= bound {
			continue
		}
		unflushed = 0
		if err := s.flushed(); err != nil {
			return n, err
		}
		s.flushedOnce = true
	}
	return n, nil
}

// errLeftBeforeText ends a generation whose client had closed its connection when its first
// text was flushed.
var errLeftBeforeText = errors.New("the client closed its connection before the first text reached it")

// flushed flushes what was written to the client and records that it was delivered. The first
// text is not delivered to a client that had already gone (the request's context ended: its
// connection was closed, or its stream reset), although the flush succeeds: a write into a
// connection whose client has closed its side only fills the kernel's buffer. The generation
// then ends uncharged, as for a client that left before the first piece.
func (s *streamer) flushed() error {
	if err := s.rc.Flush(); err != nil {
		return err
	}
	s.mu.Lock()
	if !s.delivered && ctxDone(s.client) {
		s.mu.Unlock()
		return errLeftBeforeText
	}
	s.delivered = true
	s.mu.Unlock()
	if s.http2 {
		// On HTTP/2 an armed deadline resets the stream when it fires, even while no write is
		// in flight: between pieces only the whole response's deadline stays armed. (On
		// HTTP/1.1 a deadline only bounds the next write, which sets its own.)
		s.rearm()
	}
	return nil
}

// drain waits until the writer has written every queued piece, or a write failed. It returns
// the error that ends the generation: a write that failed, unless the generation detached.
func (s *streamer) drain() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kick()
	for s.writing {
		s.moved.Wait()
	}
	return s.failed()
}

// result is what the stream found once the model's answer ended with err (after drain): the
// input of the charging rules (pipeline.Decide).
func (s *streamer) result(err error) pipeline.Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return pipeline.Stream{Err: err, Texted: s.texted, Delivered: s.delivered, Detached: s.detached,
		ClientLeft: s.writeErr != nil || ctxDone(s.client)}
}

// keepAliveComment is an SSE comment: clients ignore it, proxies see traffic.
var keepAliveComment = []byte(": keep-alive\n\n")

// startKeepAlive sends an SSE comment every interval until the first piece (sse_keepalive),
// the 200 headers with the first one: a model that takes long to load would otherwise leave the
// connection silent for up to first_piece_timeout, and proxies in between may cut it. Call the
// returned stop before the generation's last writes.
func (s *streamer) startKeepAlive(every time.Duration) (stop func()) {
	if !s.sse || every <= 0 {
		return func() {}
	}
	var t *time.Timer
	s.mu.Lock() // the callback reads t under mu: it may fire before AfterFunc returns
	defer s.mu.Unlock()
	t = time.AfterFunc(every, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.texted || s.kaStopped || s.gone || s.writeErr != nil {
			return // the writer alone writes once text has come
		}
		s.writeHeader()
		s.deadline(s.end)
		_, err := s.w.Write(keepAliveComment)
		if err == nil {
			err = s.rc.Flush()
		}
		if err != nil {
			return // the client is gone: the request's context ends the generation
		}
		if s.http2 {
			s.rearm()
		}
		t.Reset(every)
	})
	return func() {
		s.mu.Lock()
		s.kaStopped = true
		s.mu.Unlock()
		t.Stop()
	}
}

// writeHeader writes the 200 headers of the stream, once.
func (s *streamer) writeHeader() {
	if s.started {
		return
	}
	hdr := s.w.Header()
	hdr.Set("Content-Type", s.enc.contentType())
	hdr.Set("X-Credits-Used", strconv.FormatInt(s.price, 10))
	hdr.Set("X-Credits-Remaining", strconv.FormatInt(s.remaining, 10))
	hdr.Set("X-Request-Id", s.requestID)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	if !s.enc.whole() {
		// Ask proxies (nginx) and Caddy's encode (RFC 10036 "Incremental") to pass each piece
		// on at once instead of buffering.
		hdr.Set("X-Accel-Buffering", "no")
		hdr.Set("Incremental", "?1")
	}
	s.w.WriteHeader(http.StatusOK)
	s.started = true
}

// clientLeft is called once the request's context ends: a generation that delivered nothing
// yet is canceled (nothing is charged or kept), one that did runs on. While the writer runs, its
// bytes may have reached the client before its flush reports them delivered: the generation
// runs on then, and the writer stops the model itself if that flush fails (failed).
func (s *streamer) clientLeft(cancel context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone = true
	if !s.delivered && !s.writing {
		cancel()
	}
}

// write sends one piece to the client, with SSE id id where a stream can be resumed (the
// writer's).
func (s *streamer) write(piece string, id int) error {
	s.writeHeader()
	s.deadline(s.end)
	if s.kept == nil {
		id = 0 // SSE ids only where a stream can be resumed
	}
	s.buf = s.enc.piece(s.buf[:0], id, piece)
	_, err := s.w.Write(s.buf)
	return err
}

// writeWhole sends a whole encoder's answer once the model is done: x with the text held. It is
// delivered once its write and flush succeed; a client that had gone before (its request's
// context ended) gets nothing, and the generation ends as one whose client left before any text
// (writeErr): nothing is charged.
func (s *streamer) writeWhole(x ending) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctxDone(s.client) {
		s.writeErr = errLeftBeforeText
		return s.writeErr
	}
	x.text = string(s.text)
	s.buf = s.enc.end(s.buf[:0], 0, x)
	s.w.Header().Set("Content-Length", strconv.Itoa(len(s.buf)))
	s.writeHeader()
	s.deadline(s.end)
	_, err := s.w.Write(s.buf)
	if err == nil {
		err = s.rc.Flush()
	}
	// No look at the client after the flush: a client that read the whole answer closes its
	// connection at once (curl does), and its request's context may end before this line;
	// the answer reached it whole.
	if err != nil {
		s.writeErr = err
		return err
	}
	s.delivered = true
	return nil
}

// deadline sets the write deadline of the next write: WriteTimeout from now, at the latest
// limit. A connection that cannot take deadlines is written to without one.
func (s *streamer) deadline(limit time.Time) {
	if s.timeout <= 0 {
		return
	}
	d := time.Now().Add(s.timeout)
	if !limit.IsZero() && d.After(limit) {
		d = limit
	}
	// A deadline armed less than a tenth of WriteTimeout before this one is left as it is: a
	// write stays bounded by 0.9 to 1 times WriteTimeout, and a stream of many pieces does not
	// update the connection's timer for every one (8% of the process's CPU with 4,000 streams).
	// One later than wanted is never left.
	if !s.armed.IsZero() && !s.armed.After(d) && !d.After(s.armed.Add(s.timeout/10)) {
		return
	}
	s.setDeadline(d)
}

func (s *streamer) setDeadline(d time.Time) {
	s.armed = d
	_ = s.rc.SetWriteDeadline(d)
}

// rearm leaves the whole response's deadline armed after a write.
func (s *streamer) rearm() {
	if s.timeout > 0 {
		s.setDeadline(s.end)
	}
}

// close clears the write deadline once the generation's writes are done, so that the next
// request on a kept-alive connection does not inherit it.
func (s *streamer) close() {
	if s.timeout > 0 && s.started {
		s.setDeadline(time.Time{})
	}
}

// last writes what ends a stream (the encoder's end or fail, given the id after the last
// piece's where a stream can be resumed): the last write of a generation, which gets one more
// WriteTimeout even when the generation's own deadline has passed.
func (s *streamer) last(appendEnd func(dst []byte, id int) []byte) {
	id := 0
	if s.kept != nil {
		id = s.n + 1
	}
	s.buf = appendEnd(s.buf[:0], id)
	if len(s.buf) == 0 {
		return
	}
	s.deadline(time.Time{})
	if _, err := s.w.Write(s.buf); err == nil {
		_ = s.rc.Flush()
	}
}
