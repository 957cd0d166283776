package backends

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"
)

// The chat stream to a plain http:// host without a proxy goes over connections of our own
// rather than through http.Transport, which the rest of this backend (health probes, model
// checks, https:// hosts with TLS and HTTP/2, proxied hosts) keeps using.
//
// Why: every stream through the Transport holds two goroutines of its own (persistConn's
// readLoop and writeLoop, ~15 KB of stack between them, for as long as the stream runs: minutes
// for a long generation, times thousands of streams), and each request and each read of the
// response is handed between those goroutines and the caller's. Its 1 KiB write buffer also
// splits a chat request (system prompt and input, often over 1 KiB) into several write
// syscalls. Here a request is rendered once into a pooled buffer and sent with one conn.Write,
// and the response is read in the caller's goroutine: no goroutine per stream beyond the
// caller's (context.AfterFunc's runs only when the request's context ends).
//
// What is left to net/http: the wire itself. (*http.Request).Write renders the request and
// http.ReadResponse parses the answer, its headers, chunked decoding, Content-Length and
// whether the connection may be kept (resp.Close). What is done here: a pool of idle kept-alive
// connections per host, dialing, cancellation (the context's end sets a past deadline on the
// connection, so a blocked read or write fails at once and the connection is closed, which
// makes Ollama stop generating), and the one retry net/http makes for a replayable request on a
// reused connection the server had already closed.

const (
	// leanMaxIdle is the most idle connections kept per host (the Transport's
	// MaxIdleConnsPerHost for the other requests).
	leanMaxIdle = 256
	// leanIdleTimeout closes a connection idle for longer (the Transport's IdleConnTimeout).
	leanIdleTimeout = 90 * time.Second
	// leanReadBuf is a connection's read buffer: the response is read line by line into the
	// line reader's own buffer, so this one only has to hold the headers' lines (as the
	// Transport's ReadBufferSize does for the other requests).
	leanReadBuf = 1 << 10
	// leanMaxPooledBuf: a request buffer grown past this (a huge prompt) is not pooled.
	leanMaxPooledBuf = 64 << 10
)

var leanBufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// leanConns are the idle connections to one host, newest last.
type leanConns struct {
	addr string // host:port to dial

	mu     sync.Mutex
	idle   []*leanConn
	closed bool
}

// leanConn is one connection and its read buffer; the buffer stays with the connection, since
// a kept-alive connection's next answer is read through it.
type leanConn struct {
	net.Conn
	br        *bufio.Reader
	idleSince time.Time
}

// leanHost reports the address to dial for the chat streams of a host at u, or "" when they
// go through the Transport: https, or a host the Transport's proxy function (proxy) sends
// through a proxy.
func leanHost(u *url.URL, proxy func(*http.Request) (*url.URL, error)) string {
	if u.Scheme != "http" {
		return ""
	}
	if proxy != nil {
		if p, err := proxy(&http.Request{URL: u}); err != nil || p != nil {
			return ""
		}
	}
	return u.Host
}

// get takes the newest idle connection not past its idle timeout (closing the expired ones);
// nil if there is none.
func (p *leanConns) get(now time.Time) *leanConn {
	p.sweep(now)
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	c := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	return c
}

// put keeps c for the next request, or closes it if the pool is full or closed.
func (p *leanConns) put(c *leanConn) {
	c.idleSince = time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle) >= leanMaxIdle {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// sweep closes the connections idle for longer than leanIdleTimeout.
func (p *leanConns) sweep(now time.Time) {
	p.mu.Lock()
	i := 0 // the idle are oldest first: the expired ones are a prefix
	for i < len(p.idle) && now.Sub(p.idle[i].idleSince) > leanIdleTimeout {
		i++
	}
	expired := append([]*leanConn(nil), p.idle[:i]...)
	p.idle = append(p.idle[:0], p.idle[i:]...)
	clear(p.idle[len(p.idle):cap(p.idle)])
	p.mu.Unlock()
	for _, c := range expired {
		c.Close()
	}
}

// close closes the idle connections; connections in use are closed when their request ends.
func (p *leanConns) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

// leanRoundTrip sends req to h, which has a pool (h.lean), and returns the
// answer, its headers read, in the manner of http.Client.Do: an error is a *url.Error, and the
// response's Body must be closed. It never starts a goroutine that outlives the request.
// ctx (req's context) aborts it at any point.
func (c *Chat) leanRoundTrip(h *chatHost, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	buf := leanBufPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= leanMaxPooledBuf {
			buf.Reset()
			leanBufPool.Put(buf)
		}
	}()
	buf.Reset()
	if err := req.Write(buf); err != nil {
		return nil, &url.Error{Op: "Post", URL: req.URL.String(), Err: err}
	}
	pool := h.lean
	lc := pool.get(time.Now())
	reused := lc != nil
	for {
		if lc == nil {
			conn, err := c.dial(ctx, "tcp", pool.addr)
			if err != nil {
				return nil, &url.Error{Op: "Post", URL: req.URL.String(), Err: err}
			}
			lc = &leanConn{Conn: conn, br: bufio.NewReaderSize(conn, leanReadBuf)}
		}
		resp, retry, err := lc.roundTrip(ctx, pool, req, buf.Bytes())
		if err == nil {
			return resp, nil
		}
		// A reused connection the server had closed while it was idle (it cannot tell us
		// otherwise: nothing reads an idle connection) fails before any byte of the answer;
		// the request, marked replayable, goes once more on a new connection.
		if !reused || !retry || ctx.Err() != nil {
			return nil, &url.Error{Op: "Post", URL: req.URL.String(), Err: err}
		}
		lc, reused = nil, false
	}
}

// roundTrip writes the rendered request raw in one Write and reads the answer's headers. On
// failure it closes c; retry reports that no byte of an answer came (the request may be sent
// again). On success the response's Body, once closed, gives c back to pool or closes it.
func (c *leanConn) roundTrip(ctx context.Context, pool *leanConns, req *http.Request, raw []byte) (resp *http.Response, retry bool, err error) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error, retry bool) (*http.Response, bool, error) {
		stop()
		c.Close()
		return nil, retry, err
	}
	if _, err := c.Write(raw); err != nil {
		return fail(err, true)
	}
	// The first byte of the answer tells a connection the server closed while it was idle (EOF
	// or a reset at once) from one that failed later.
	if _, err := c.br.Peek(1); err != nil {
		return fail(err, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET))
	}
	for {
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err, false)
		}
		// 1xx answers other than 101 precede the real one (net/http skips them too).
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		resp.Body.Close() // empty
	}
	resp.Body = &leanBody{body: resp.Body, c: c, pool: pool, ctx: ctx, stop: stop, keep: !resp.Close}
	return resp, false, nil
}

// leanBody is a response body that, when closed, gives its connection back to the pool if the
// body was read to its end without error, the server did not ask to close it, and the request
// was not cancelled; otherwise it closes the connection (net/http's body would drain the rest
// first: a stream of minutes).
type leanBody struct {
	body io.ReadCloser
	c    *leanConn
	pool *leanConns
	ctx  context.Context
	stop func() bool
	keep bool // the response allows keeping the connection
	eof  bool // the body was read to its end
	bad  bool // a read failed
	done bool
}

func (b *leanBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err != nil {
		b.bad = true
	}
	return n, err
}

// pending and waitData let a line reader wait for the model's next bytes in the connection's
// own read buffer, without one of its own (dataWaiter). Only the connection's buffer is
// between them: net/http's chunked reader keeps nothing of its own between reads, and a body
// of a known length returns io.EOF with its last bytes. An empty body (http.NoBody) ends
// without a byte from the connection, so it never waits there.
func (b *leanBody) pending() bool {
	return !b.eof && !b.bad && !b.done && b.body != http.NoBody
}

func (b *leanBody) waitData() {
	// An error here (a deadline set by the cancel, a closed connection) is left for the read
	// that follows, which meets it again at once, through the layers that report it.
	_, _ = b.c.br.Peek(1)
}

func (b *leanBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	// stop is false if the context ended (its deadline may be set on the connection).
	stopped := b.stop()
	if stopped && b.keep && b.eof && !b.bad && b.ctx.Err() == nil && b.c.br.Buffered() == 0 {
		b.pool.put(b.c)
	} else {
		b.c.Close()
	}
	return nil
}
