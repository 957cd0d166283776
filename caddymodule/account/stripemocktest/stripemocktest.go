// Package stripemocktest runs the real stripe-mock (Stripe's own mock of its API, pinned to
// v0.203.0) for tests: it builds it once into a cache folder with `go install` and starts it on
// a free loopback port. stripe-mock answers API calls from Stripe's OpenAPI specification; it
// keeps no state and sends no webhooks, so tests sign webhook payloads themselves.
package stripemocktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Version is the pinned stripe-mock.
const Version = "v0.203.0"

// CacheDir is where the binary is cached: $TEXTGEN_CACHE if set, else
// os.UserCacheDir()/caddy-textgen (the same folder as the Ollama test binary).
func CacheDir() (string, error) {
	if d := os.Getenv("TEXTGEN_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the cache folder (set TEXTGEN_CACHE): %w", err)
	}
	return filepath.Join(d, "caddy-textgen"), nil
}

// EnsureBinary returns the path of the pinned stripe-mock, building it first when it is missing
// (`GOBIN=<cache>/stripe-mock-v0.203.0 go install github.com/stripe/stripe-mock@v0.203.0`, a few
// seconds). A file lock makes test processes that run at the same time build it only once.
// $TEXTGEN_STRIPE_MOCK_BIN names a binary to use instead.
func EnsureBinary() (string, error) {
	if p := os.Getenv("TEXTGEN_STRIPE_MOCK_BIN"); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("TEXTGEN_STRIPE_MOCK_BIN: %w", err)
		}
		return p, nil
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "stripe-mock-"+Version)
	bin := filepath.Join(dir, "stripe-mock")
	if checkExecutable(bin) == nil {
		return bin, nil
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if checkExecutable(bin) == nil { // built by another process while we waited
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("building stripe-mock: %w", err)
	}
	// Install into a fresh folder and rename into place, so an interrupted build never leaves a
	// half-written binary that a later run would trust.
	tmp, err := os.MkdirTemp(cache, ".stripe-mock-build-*")
	if err != nil {
		return "", fmt.Errorf("building stripe-mock: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "install", "github.com/stripe/stripe-mock@"+Version)
	cmd.Dir = tmp // outside any module, so the current go.mod plays no part
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	fmt.Fprintf(os.Stderr, "stripemocktest: building stripe-mock %s into %s\n", Version, dir)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building stripe-mock: go install github.com/stripe/stripe-mock@%s: %w\n%s", Version, err, out.Bytes())
	}
	if err := os.Rename(filepath.Join(tmp, "stripe-mock"), bin); err != nil {
		return "", fmt.Errorf("building stripe-mock: %w", err)
	}
	return bin, nil
}

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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
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

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 || fi.Size() == 0 {
		return &fs.PathError{Op: "exec", Path: path, Err: errors.New("not an executable file")}
	}
	return nil
}

// lockFile takes an exclusive flock on path (created if needed), blocking until it is free.
func lockFile(path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
