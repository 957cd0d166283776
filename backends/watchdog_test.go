package backends

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"
)

// The watchdogs on virtual time (testing/synctest): the model server is a net/http handler
// served over in-memory connections (net.Pipe) inside the bubble, where time moves only while
// every goroutine waits. So the defaults, first_piece_timeout 60 s and idle_timeout 30 s, are
// tested as they are, to the second, in no wall time and on any machine. (The fault server
// tests the same watchdogs over real loopback connections with short timeouts.)

// pipeListener hands the server the far ends of the pipes that pipeChat's dial makes.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr {
	return &net.UnixAddr{Name: "pipe", Net: "pipe"}
}

// pacedModel streams a piece after each of gaps, then the done line, or, with stall, nothing
// more until the request ends.
func pacedModel(gaps []time.Duration, stall bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server notices the client leaving (r.Context())
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, gap := range gaps {
			select {
			case <-time.After(gap):
			case <-r.Context().Done():
				return
			}
			fmt.Fprintln(w, `{"message":{"role":"assistant","content":"a "},"done":false}`)
			w.(http.Flusher).Flush()
		}
		if stall {
			<-r.Context().Done()
			return
		}
		fmt.Fprintln(w, `{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","eval_count":2}`)
	})
}

// pipeChat is a Chat on the Ollama wire with the default timeouts whose one host is model,
// served in the bubble; both end with the test.
func pipeChat(t *testing.T, model http.Handler) *Chat {
	t.Helper()
	// No health probe within the test's virtual time: it would go over the real network.
	o, err := NewChat(ChatConfig{Wire: NewOllamaWire(nil), Hosts: []string{"http://model.test:11434"}, HealthInterval: 24 * time.Hour,
		Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if o.hosts[0].lean == nil {
		t.Fatal("the host does not use its own connections (a proxy in the environment?)")
	}
	ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: model}
	go srv.Serve(ln)
	o.dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
		near, far := net.Pipe()
		select {
		case ln.conns <- far:
			return near, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	t.Cleanup(func() {
		o.Close()
		srv.Close()
	})
	return o
}

func TestWatchdogsOnVirtualTime(t *testing.T) {
	const s = time.Second
	cases := []struct {
		name    string
		gaps    []time.Duration
		stall   bool
		want    Kind // -1: success
		text    string
		elapsed time.Duration
	}{
		{name: "first piece just in time, then pieces just in time", gaps: []time.Duration{59 * s, 29 * s, 29 * s}, want: -1, elapsed: 117 * s},
		{name: "no first piece", stall: true, want: KindTimeout, text: "first piece", elapsed: 60 * s},
		{name: "a first piece too late", gaps: []time.Duration{61 * s}, want: KindTimeout, text: "first piece", elapsed: 60 * s},
		{name: "stall after 2 pieces", gaps: []time.Duration{0, 0}, stall: true, want: KindInterrupted, text: "idle", elapsed: 30 * s},
		{name: "a third piece too late", gaps: []time.Duration{10 * s, 20 * s, 31 * s}, want: KindInterrupted, text: "idle", elapsed: 60 * s},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := pipeChat(t, pacedModel(tc.gaps, tc.stall))
				start := time.Now()
				stats, err := o.Generate(context.Background(), Request{Model: "m", Prompt: "hi"}, func(string) error { return nil })
				if elapsed := time.Since(start); elapsed != tc.elapsed {
					t.Errorf("ended after %v of virtual time, want %v", elapsed, tc.elapsed)
				}
				if tc.want < 0 {
					if err != nil || stats.Pieces != len(tc.gaps) {
						t.Fatalf("stats %+v, err %v; want %d pieces", stats, err, len(tc.gaps))
					}
					return
				}
				var be *Error
				if !errors.As(err, &be) || be.Kind != tc.want || !strings.Contains(err.Error(), tc.text) {
					t.Fatalf("got %v, want a %s error about %q", err, tc.want, tc.text)
				}
			})
		})
	}
}
