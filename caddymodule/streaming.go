package caddymodule

import (
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

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

// streamer writes the pieces of one generation to the client.
//
// Every write has a deadline: WriteTimeout from its start, and never later than the end of the
// generation (the whole response). A client that stops reading (a stalled or deliberately slow
// reader whose socket buffers are full) would otherwise keep its model place, its account's place
// and its hold for as long as it likes; with the deadline the write fails, the generation stops,
// and the text it was sent is charged.
type streamer struct {
	g       *generation
	rc      *http.ResponseController
	timeout time.Duration // per write (WriteTimeout)
	end     time.Time     // the generation's deadline: no write outlives it
	armed   time.Time     // the write deadline set last (zero: none)
	started bool          // the 200 headers were written
	texted  bool          // a piece of text was written (started may be true before: keep-alives)
	// delivered: a piece reached the client's connection (a write and its flush succeeded);
	// only then may a client that leaves be charged.
	delivered bool
	writeErr  error
	buf       []byte

	// With retention on (kept != nil), every piece is kept, and a client that leaves after text
	// was delivered detaches the generation from the response: it runs to its end for the
	// followers and the ledger. mu orders a piece's delivery with clientLeft.
	kept     *keptText
	mu       sync.Mutex
	gone     bool // the request's context ended
	detached bool // no more writes: the generation goes on for kept alone
	n        int  // pieces emitted: the SSE id of the last one

	// keepAlive: SSE comments are sent until the first piece (startKeepAlive); mu then orders
	// them with the pieces.
	keepAlive bool
	kaStopped bool
	// pending: pieces were written but not flushed; the backend calls flush once it holds no
	// further piece (backends.Request.Flush), so pieces that arrive together go out together.
	pending bool
}

// emit sends one piece. The first piece sends the 200 headers.
func (s *streamer) emit(piece string) error {
	if s.kept != nil {
		return s.emitKept(piece)
	}
	if s.keepAlive {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	return s.write(piece)
}

// keepAliveComment is an SSE comment: clients ignore it, proxies see traffic.
var keepAliveComment = []byte(": keep-alive\n\n")

// startKeepAlive sends an SSE comment every interval until the first piece (sse_keepalive),
// the 200 headers with the first one: a model that takes long to load would otherwise leave the
// connection silent for up to first_piece_timeout, and proxies in between may cut it. Call the
// returned stop before the generation's last writes.
func (s *streamer) startKeepAlive(every time.Duration) (stop func()) {
	if !s.g.sse || every <= 0 {
		return func() {}
	}
	s.keepAlive = true
	var t *time.Timer
	t = time.AfterFunc(every, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.texted || s.kaStopped || s.gone || s.writeErr != nil {
			return
		}
		s.writeHeader()
		s.deadline(s.end)
		_, err := s.g.w.Write(keepAliveComment)
		if err == nil {
			err = s.rc.Flush()
		}
		if err != nil {
			return // the client is gone: the request's context ends the generation
		}
		if s.g.r.ProtoMajor >= 2 {
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
	g := s.g
	hdr := g.w.Header()
	if g.sse {
		hdr.Set("Content-Type", "text/event-stream")
	} else {
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
	}
	hdr.Set("X-Credits-Used", "1")
	hdr.Set("X-Credits-Remaining", strconv.FormatInt(g.remaining, 10))
	hdr.Set("X-Request-Id", g.id)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	// Ask proxies (nginx) and Caddy's encode (RFC 10036 "Incremental") to pass each piece on
	// at once instead of buffering.
	hdr.Set("X-Accel-Buffering", "no")
	hdr.Set("Incremental", "?1")
	g.w.WriteHeader(http.StatusOK)
	s.started = true
}

// emitKept keeps the piece, then sends it while the client is there. A piece that cannot be
// delivered after others were stops nothing: the generation detaches and runs on.
func (s *streamer) emitKept(piece string) error {
	kept := s.kept.add(piece)
	s.n++
	if s.detached {
		if !kept {
			return errKeptFull // nobody reads it any more
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone && s.delivered {
		s.detached = true
		return nil
	}
	if err := s.write(piece); err != nil {
		if s.delivered {
			s.detached = true
			return nil
		}
		return err
	}
	return nil
}

// clientLeft is called once the request's context ends: a generation that delivered nothing
// yet is canceled (nothing is charged or kept), one that did runs on.
func (s *streamer) clientLeft(cancel context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone = true
	if !s.delivered {
		cancel()
	}
}

// write sends one piece to the client.
func (s *streamer) write(piece string) error {
	g := s.g
	s.writeHeader()
	s.texted = true
	s.deadline(s.end)
	var err error
	if g.sse {
		id := 0 // SSE ids only where a stream can be resumed
		if s.kept != nil {
			id = s.n
		}
		s.buf = appendDelta(s.buf[:0], id, piece)
		_, err = g.w.Write(s.buf)
	} else {
		s.buf = append(s.buf[:0], piece...)
		_, err = g.w.Write(s.buf)
	}
	if err != nil {
		s.writeErr = err
		return err
	}
	s.pending = true
	return nil
}

// flush sends the written pieces on to the client (backends.Request.Flush).
func (s *streamer) flush() error {
	if s.kept != nil || s.keepAlive {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	if !s.pending || s.detached {
		return nil
	}
	s.pending = false
	if err := s.rc.Flush(); err != nil {
		s.writeErr = err
		if s.kept != nil && s.delivered {
			s.detached = true // the generation runs on for the kept text
			return nil
		}
		return err
	}
	s.delivered = true
	if s.g.r.ProtoMajor >= 2 {
		// On HTTP/2 an armed deadline resets the stream when it fires, even while no write is
		// in flight: between pieces only the whole response's deadline stays armed. (On
		// HTTP/1.1 a deadline only bounds the next write, which sets its own.)
		s.rearm()
	}
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

// event writes one whole SSE event with a JSON payload: the last write of a generation, which
// gets one more WriteTimeout even when the generation's own deadline has passed.
func (s *streamer) event(name string, v any) {
	s.deadline(time.Time{})
	data, _ := jsonMarshal(v)
	s.buf = s.buf[:0]
	if s.kept != nil { // the end of a resumable stream has the id after its last piece's
		s.buf = appendEventID(s.buf, s.n+1)
	}
	s.buf = append(s.buf, "event: "...)
	s.buf = append(s.buf, name...)
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, "\n\n"...)
	if _, err := s.g.w.Write(s.buf); err == nil {
		_ = s.rc.Flush()
	}
}
