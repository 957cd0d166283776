package backends

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
	"weak"

	"go.uber.org/zap/zaptest"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

// Tests of the chat streams' own connections (conn.go), against the fault server and
// small servers of net/http that misbehave in the ways a kept-alive connection can.

// leanDials counts the connections a backend dials and the Write calls made on them.
type leanDials struct {
	dials, writes atomic.Int64
}

type countingConn struct {
	net.Conn
	d *leanDials
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.d.writes.Add(1)
	return c.Conn.Write(p)
}

func leanChat(t *testing.T, cfg ChatConfig) (*Chat, *leanDials) {
	t.Helper()
	cfg.Logger = zaptest.NewLogger(t)
	o, err := NewChat(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	d := &leanDials{}
	dial := o.dial
	o.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		d.dials.Add(1)
		return &countingConn{Conn: c, d: d}, nil
	}
	for _, h := range o.hosts {
		if h.lean == nil {
			t.Fatalf("host %s does not use its own connections", h.name)
		}
	}
	return o, d
}

func leanCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (p *leanConns) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func leanWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func leanKind(t *testing.T, err error, want Kind) {
	t.Helper()
	var be *Error
	if !errors.As(err, &be) || be.Kind != want {
		t.Fatalf("got %v, want a %s error", err, want)
	}
}

// noTransportStreams fails if a goroutine of http.Transport's connections is running: a chat
// stream must hold none.
func noTransportStreams(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	if strings.Contains(stacks, "persistConn") {
		t.Errorf("a stream runs on http.Transport's goroutines:\n%s", stacks)
	}
}

// Sequential generations share one connection, and each request (its system prompt well over
// the Transport's 1 KiB write buffer) goes out in one Write.
func TestLeanConnReusedOneWrite(t *testing.T) {
	for _, api := range []string{"ollama", "openai"} {
		t.Run(api, func(t *testing.T) {
			fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Delay: time.Millisecond})
			o, d := leanChat(t, ChatConfig{Wire: map[string]Wire{"ollama": NewOllamaWire(nil), "openai": NewOpenAIWire("")}[api], Hosts: []string{fs.URL}})
			req := Request{Model: ollamatest.DefaultModel, System: strings.Repeat("system prompt ", 300), Prompt: "hi"}
			for i := range 5 {
				if _, err := o.Generate(leanCtx(t), req, func(string) error {
					if i == 0 {
						noTransportStreams(t)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			if n := fs.Connections(); n != 1 {
				t.Errorf("the server accepted %d connections for 5 sequential generations, want 1", n)
			}
			if n := d.dials.Load(); n != 1 {
				t.Errorf("%d dials, want 1", n)
			}
			if n := d.writes.Load(); n != 5 {
				t.Errorf("%d writes for 5 requests of %d bytes of system prompt, want 5", n, len(req.System))
			}
			if got := fs.LastRequest().Messages[0].Content; got != req.System {
				t.Errorf("the server got a system prompt of %d bytes, want %d", len(got), len(req.System))
			}
			if n := o.hosts[0].lean.idleCount(); n != 1 {
				t.Errorf("%d idle connections, want 1", n)
			}
		})
	}
}

// ndjsonServer is a small Ollama chat endpoint: pieces pieces and the done line; header, if set,
// adjusts the answer's headers. It counts the connections it accepts and closes.
type ndjsonServer struct {
	*httptest.Server
	opened, closed atomic.Int64
}

func newNDJSONServer(t *testing.T, pieces int, header func(http.Header), cfg func(*http.Server)) *ndjsonServer {
	s := &ndjsonServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if header != nil {
			header(w.Header())
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		for range pieces {
			fmt.Fprintln(w, `{"message":{"role":"assistant","content":"a "},"done":false}`)
			w.(http.Flusher).Flush()
		}
		fmt.Fprintln(w, `{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","eval_count":2}`)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.closed.Add(1)
		}
	}
	if cfg != nil {
		cfg(s.Config)
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// A kept-alive connection the server closed while it was idle fails the next request before
// any byte of an answer; the request goes again on a new connection, and the caller sees none
// of it.
func TestLeanServerClosedIdleConn(t *testing.T) {
	srv := newNDJSONServer(t, 2, nil, func(s *http.Server) { s.IdleTimeout = 50 * time.Millisecond })
	o, d := leanChat(t, ChatConfig{Hosts: []string{srv.URL}})
	req := Request{Model: "m", Prompt: "hi"}
	for i := range 3 {
		if _, err := o.Generate(leanCtx(t), req, func(string) error { return nil }); err != nil {
			t.Fatalf("generation %d: %v", i, err)
		}
		if n := o.hosts[0].lean.idleCount(); n != 1 {
			t.Fatalf("generation %d: %d idle connections, want 1", i, n)
		}
		// The server closes the idle connection; the client is not told.
		leanWait(t, "the server to close its idle connection", func() bool { return srv.closed.Load() == int64(i+1) })
	}
	if n := d.dials.Load(); n != 3 {
		t.Errorf("%d dials, want 3", n)
	}
	// Each later generation wrote once on the closed connection and once on its new one.
	if n := d.writes.Load(); n != 5 {
		t.Errorf("%d writes, want 5", n)
	}
}

// Cancelling the request's context, or a watchdog cancelling the attempt, closes the connection
// at once mid-stream (the server sees its client go away) and it is not used again.
func TestLeanCancelClosesConn(t *testing.T) {
	cases := []struct {
		name  string
		fault ollamatest.FaultConfig
		req   Request
		want  Kind
	}{
		{name: "context", fault: ollamatest.FaultConfig{Pieces: 1000, Delay: time.Millisecond}, want: KindCanceled},
		{name: "idle timeout", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStall, Pieces: 2},
			req: Request{IdleTimeout: 50 * time.Millisecond}, want: KindInterrupted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := ollamatest.NewFaultServerT(t, tc.fault)
			o, _ := leanChat(t, ChatConfig{Hosts: []string{fs.URL}})
			ctx, cancel := context.WithCancel(leanCtx(t))
			defer cancel()
			req := tc.req
			req.Model, req.Prompt = ollamatest.DefaultModel, "hi"
			n := 0
			_, err := o.Generate(ctx, req, func(string) error {
				if n++; n == 2 {
					noTransportStreams(t)
					if tc.want == KindCanceled {
						cancel()
					}
				}
				return nil
			})
			leanKind(t, err, tc.want)
			leanWait(t, "the server to see its client go away", func() bool { return fs.ClientGone() == 1 })
			if fs.PiecesSent() > 100 {
				t.Errorf("the server sent %d pieces after the stop at 2", fs.PiecesSent())
			}
			if n := o.hosts[0].lean.idleCount(); n != 0 {
				t.Errorf("%d idle connections after a stopped stream, want 0", n)
			}
			fs.Set(ollamatest.FaultConfig{Pieces: 1})
			if _, err := o.Generate(leanCtx(t), Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(string) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if n := fs.Connections(); n != 2 {
				t.Errorf("the server accepted %d connections, want 2 (the stopped stream's is not reused)", n)
			}
		})
	}
}

// An answer that says "Connection: close", and one whose body was not read to its end, do not
// leave their connection in the pool.
func TestLeanNotPooled(t *testing.T) {
	t.Run("connection close", func(t *testing.T) {
		srv := newNDJSONServer(t, 2, func(h http.Header) { h.Set("Connection", "close") }, nil)
		o, d := leanChat(t, ChatConfig{Hosts: []string{srv.URL}})
		for range 2 {
			if _, err := o.Generate(leanCtx(t), Request{Model: "m", Prompt: "hi"}, func(string) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if n := o.hosts[0].lean.idleCount(); n != 0 {
				t.Fatalf("%d idle connections after Connection: close, want 0", n)
			}
		}
		// Not reused, so not retried either: one write per request.
		if dials, writes := d.dials.Load(), d.writes.Load(); dials != 2 || writes != 2 {
			t.Errorf("%d dials and %d writes, want 2 and 2", dials, writes)
		}
	})

	t.Run("body not read to its end", func(t *testing.T) {
		// A malformed line ends the generation while the server still streams.
		var gone atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			fmt.Fprintln(w, `{"message":{"content":"a "},"done":false}`)
			fmt.Fprintln(w, `not json`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				gone.Add(1)
			case <-time.After(30 * time.Second):
			}
		}))
		t.Cleanup(srv.Close)
		o, _ := leanChat(t, ChatConfig{Hosts: []string{srv.URL}})
		_, err := o.Generate(leanCtx(t), Request{Model: "m", Prompt: "hi"}, func(string) error { return nil })
		leanKind(t, err, KindInterrupted)
		// Had the body been drained instead of the connection closed, the server would have
		// ended on its own 30 s later without seeing its client go.
		leanWait(t, "the server to see its client go away", func() bool { return gone.Load() == 1 })
		if n := o.hosts[0].lean.idleCount(); n != 0 {
			t.Errorf("%d idle connections after a body not read to its end, want 0", n)
		}
	})
}

// Many generations at once on one host each get their own connection and their pieces in order;
// the connections are then reused.
func TestLeanConcurrent(t *testing.T) {
	const streams, pieces = 200, 20
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: pieces, Numbered: true, Delay: time.Millisecond})
	o, d := leanChat(t, ChatConfig{Hosts: []string{fs.URL}})
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make(chan error, streams)
		for range streams {
			wg.Go(func() {
				var got strings.Builder
				if _, err := o.Generate(leanCtx(t), Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(p string) error {
					got.WriteString(p)
					return nil
				}); err != nil {
					errs <- err
					return
				}
				var want strings.Builder
				for i := range pieces {
					fmt.Fprintf(&want, "tok %d ", i)
				}
				if got.String() != want.String() {
					errs <- fmt.Errorf("got %q, want %q", got.String(), want.String())
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		if t.Failed() {
			return
		}
	}
	if n := d.dials.Load(); n > streams {
		t.Errorf("%d dials for 2 rounds of %d generations, want at most %d", n, streams, streams)
	}
	if n := o.hosts[0].lean.idleCount(); n != int(d.dials.Load()) {
		t.Errorf("%d idle connections, want every one dialed (%d)", n, d.dials.Load())
	}
}

// Idle connections past the idle timeout are closed when taken and by the sweep; Close closes
// the rest, and a connection given back after Close is closed.
func TestLeanIdleExpiry(t *testing.T) {
	var closed atomic.Int64
	conn := func() *leanConn {
		a, b := net.Pipe()
		t.Cleanup(func() { b.Close() })
		return &leanConn{Conn: &closeCounter{Conn: a, n: &closed}}
	}
	p := &leanConns{}
	now := time.Now()
	for range 3 {
		p.put(conn())
	}
	p.idle[0].idleSince = now.Add(-2 * leanIdleTimeout)
	p.idle[1].idleSince = now.Add(-2 * leanIdleTimeout)
	p.sweep(now)
	if p.idleCount() != 1 || closed.Load() != 2 {
		t.Fatalf("after the sweep: %d idle, %d closed; want 1 and 2", p.idleCount(), closed.Load())
	}
	if c := p.get(now.Add(2 * leanIdleTimeout)); c != nil || closed.Load() != 3 {
		t.Fatalf("an expired connection was taken (%v), or not closed (%d closed)", c, closed.Load())
	}
	p.put(conn())
	if c := p.get(now); c == nil {
		t.Fatal("a fresh idle connection was not taken")
	} else {
		p.put(c)
	}
	p.close()
	p.put(conn())
	if p.idleCount() != 0 || closed.Load() != 5 {
		t.Fatalf("after close: %d idle, %d closed; want 0 and 5", p.idleCount(), closed.Load())
	}
}

type closeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c *closeCounter) Close() error {
	c.n.Add(1)
	return c.Conn.Close()
}

// https:// hosts keep the Transport (TLS, HTTP/2).
func TestLeanOnlyPlainHTTP(t *testing.T) {
	o, err := NewChat(ChatConfig{Hosts: []string{"https://127.0.0.1:1", "http://127.0.0.1:2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.hosts[0].lean != nil || o.hosts[1].lean == nil || o.hosts[1].lean.addr != "127.0.0.1:2" {
		t.Errorf("lean pools: https %v, http %v", o.hosts[0].lean, o.hosts[1].lean)
	}
	// A host the Transport would reach through a proxy keeps the Transport too. (The proxy
	// function is the Transport's: http.ProxyFromEnvironment reads the environment once per
	// process, so it is given here rather than set in the environment.)
	u, _ := ParseOllamaHost("http://model.example:11434")
	viaProxy := func(*http.Request) (*url.URL, error) { return url.Parse("http://proxy.example:3128") }
	direct := func(*http.Request) (*url.URL, error) { return nil, nil }
	if got := leanHost(u, viaProxy); got != "" {
		t.Errorf("a proxied host got its own connections to %q", got)
	}
	if got := leanHost(u, direct); got != "model.example:11434" {
		t.Errorf("a host without a proxy: %q, want model.example:11434", got)
	}
}

// A stream that waits for the model's next piece holds no line buffer of its own (it waits in
// its connection's read buffer), and every buffer goes back when the streams end: thousands of
// open streams would otherwise hold 4 KiB each for as long as they run.
func TestLeanWaitHoldsNoLineBuffer(t *testing.T) {
	const streams = 20
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Numbered: true, Delay: time.Second})
	o, _ := leanChat(t, ChatConfig{Hosts: []string{fs.URL}})
	base := lineBuffersHeld.Load()
	ctx, cancel := context.WithCancel(leanCtx(t))
	defer cancel()
	var started, running atomic.Int64
	var wg sync.WaitGroup
	for range streams {
		running.Add(1)
		wg.Go(func() {
			defer running.Add(-1)
			first := true
			o.Generate(ctx, Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(string) error {
				if first {
					first = false
					started.Add(1)
				}
				return nil
			})
		})
	}
	leanWait(t, "every stream's first piece", func() bool { return started.Load() == streams })
	// Between two pieces every stream waits for the next one.
	var held int64
	leanWait(t, "the open streams to hold no line buffer", func() bool {
		if running.Load() != streams {
			t.Fatalf("a stream ended before the open streams were seen holding no line buffer (they held %d)", held)
		}
		held = lineBuffersHeld.Load() - base
		return held == 0
	})
	cancel()
	wg.Wait()
	if n := lineBuffersHeld.Load() - base; n != 0 {
		t.Errorf("%d line buffers held after the streams ended, want 0", n)
	}
}

// A stream that delivered text holds neither its prompt nor its encoded chat request (both are
// needed only until then, for another attempt): a long generation would keep them for minutes,
// thousands of times over. Weak pointers show whether the collector could take them.
func TestStreamDropsPrompt(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 2, Delay: time.Second})
	o, _ := leanChat(t, ChatConfig{Hosts: []string{fs.URL}})
	ctx, cancel := context.WithCancel(leanCtx(t))
	defer cancel()
	collected := func(what string, p weak.Pointer[byte]) {
		t.Helper()
		runtime.GC()
		runtime.GC()
		if p.Value() != nil {
			t.Errorf("%s is still held while the stream waits for its next piece", what)
		}
	}
	started := func() (Emit, chan struct{}) {
		first := make(chan struct{}, 2)
		return func(string) error { first <- struct{}{}; return nil }, first
	}

	// Through Generate: the prompt the caller passed.
	emit, first := started()
	system, done := weak.Pointer[byte]{}, make(chan error, 1)
	func() {
		s := strings.Repeat("You write well. ", 4096)
		system = weak.Make(unsafe.StringData(s))
		req := Request{Model: ollamatest.DefaultModel, System: s, Prompt: "hi"}
		go func() { _, err := o.Generate(ctx, req, emit); done <- err }()
	}()
	<-first
	collected("the system prompt", system)

	// One attempt: the encoded chat request it was given.
	emit, first = started()
	var body weak.Pointer[byte]
	func() {
		raw, err := o.wire.Encode(Request{Model: ollamatest.DefaultModel, System: strings.Repeat("You write well. ", 4096), Prompt: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		body = weak.Make(&raw[0])
		chat := &chatBody{raw: raw}
		go func() {
			_, err := o.generateOn(ctx, o.hosts[0], &Request{}, chat, emit, time.Now())
			runtime.KeepAlive(chat) // as Generate keeps it, for another attempt
			done <- err
		}()
	}()
	<-first
	collected("the encoded chat request", body)

	cancel()
	<-done
	<-done
}
