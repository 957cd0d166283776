// Package stripemocktest runs the real stripe-mock (Stripe's own mock of its API, pinned to
// v0.203.0) for tests: it builds it once into a cache folder with `go install` and starts it on
// a free loopback port. stripe-mock answers API calls from Stripe's OpenAPI specification; it
// keeps no state and sends no webhooks, so tests sign webhook payloads themselves.
package stripemocktest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest/gobin"
	"github.com/caddy-textgen/textgen/internal/freeport"
)

// Version is the pinned stripe-mock.
const Version = "v0.203.0"

// program is the pinned stripe-mock, cached beside the Ollama test binary.
var program = gobin.Program{
	Module: "github.com/stripe/stripe-mock", Version: Version, Name: "stripe-mock",
	EnvOverride: "TEXTGEN_STRIPE_MOCK_BIN",
}

// EnsureBinary returns the path of the pinned stripe-mock, building it first when it is missing
// (`go install github.com/stripe/stripe-mock@v0.203.0` into <cache>/stripe-mock-v0.203.0, a few
// seconds), once per machine even when test processes run at the same time.
// $TEXTGEN_STRIPE_MOCK_BIN names a binary to use instead.
func EnsureBinary() (string, error) { return program.Ensure() }

// Server is a running stripe-mock.
type Server struct {
	URL string // http://127.0.0.1:PORT, the Stripe API base URL to use

	cmd      *exec.Cmd
	log      bytes.Buffer
	exited   chan struct{}
	stopOnce sync.Once
}

// Start builds stripe-mock if needed and starts it on a free loopback port. Call Stop.
func Start(ctx context.Context) (*Server, error) {
	bin, err := EnsureBinary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 { // a free port can be taken by someone else before stripe-mock binds it
		s, err := start(ctx, bin)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(ctx context.Context, bin string) (*Server, error) {
	p, err := freeport.Pick(1)
	if err != nil {
		return nil, err
	}
	port := p[0]
	s := &Server{URL: "http://127.0.0.1:" + strconv.Itoa(port), exited: make(chan struct{})}
	// -http-port alone serves plain HTTP only (with -http-addr, stripe-mock also opens HTTPS on
	// its default port 12112, which collides between concurrent runs).
	s.cmd = exec.Command(bin, "-http-port", strconv.Itoa(port))
	s.cmd.Stdout, s.cmd.Stderr = &syncWriter{w: &s.log}, &syncWriter{w: &s.log}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting stripe-mock: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("stripe-mock exited at start: %s", s.Log())
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/v1/balance", nil)
		req.SetBasicAuth("sk_test_123", "")
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("stripe-mock did not answer on %s within 30s: %s", s.URL, s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Log returns what stripe-mock printed so far.
func (s *Server) Log() string {
	logMu.Lock()
	defer logMu.Unlock()
	return s.log.String()
}

// Stop ends the process. It is safe to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		if s.cmd.Process != nil {
			s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(5 * time.Second):
				s.cmd.Process.Kill()
				<-s.exited
			}
		}
	})
	return nil
}

var logMu sync.Mutex

type syncWriter struct{ w *bytes.Buffer }

func (s *syncWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	return s.w.Write(p)
}
