package ollamatest

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Relay is a TCP relay in front of a server (the real Ollama): it passes bytes unchanged and
// counts the connections its clients closed. Cancelling a generation must close the HTTP
// connection to Ollama (that is how Ollama learns to stop), while a generation that ends by
// itself leaves the connection open for reuse; the count tells the two apart on the wire,
// whatever the model generates. It is instrumentation, not a fake: the answers are Ollama's.
type Relay struct {
	URL string // http://127.0.0.1:PORT

	ln           net.Listener
	target       string
	clientClosed atomic.Int64
	wg           sync.WaitGroup
	mu           sync.Mutex
	conns        map[net.Conn]struct{}
}

// NewRelay starts a relay to targetHost ("127.0.0.1:PORT").
func NewRelay(targetHost string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{URL: "http://" + ln.Addr().String(), ln: ln, target: targetHost, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// ClientClosed is the number of connections whose client closed them.
func (r *Relay) ClientClosed() int64 { return r.clientClosed.Load() }

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go r.serve(c)
	}
}

func (r *Relay) track(c net.Conn, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.conns[c] = struct{}{}
	} else {
		delete(r.conns, c)
	}
}

func (r *Relay) serve(client net.Conn) {
	defer r.wg.Done()
	server, err := net.Dial("tcp", r.target)
	if err != nil {
		client.Close()
		return
	}
	r.track(client, true)
	r.track(server, true)
	var serverEnded atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, rerr := server.Read(buf)
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return // the client is gone: the reader below sees it and counts it
				}
			}
			if rerr != nil {
				// The server ended the connection first: pass that on, and do not count the
				// client's close that follows.
				serverEnded.Store(true)
				if tc, ok := client.(*net.TCPConn); ok {
					tc.CloseWrite()
				} else {
					client.Close()
				}
				return
			}
		}
	}()
	// Client to server: ends when the client closes the connection (or the relay is closed).
	_, err = io.Copy(server, client)
	if !serverEnded.Load() && !errors.Is(err, net.ErrClosed) {
		r.clientClosed.Add(1)
	}
	server.Close()
	client.Close()
	<-done
	r.track(client, false)
	r.track(server, false)
}

// Close stops the relay and closes its connections.
func (r *Relay) Close() {
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
