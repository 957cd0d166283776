// Package redistest runs a real redis-server for tests: Debian's binary, no persistence (no RDB
// snapshot, no append-only file), a free loopback port of its own, so that two test runs on one
// machine never meet. Tests that need Redis to go away and come back stop and start it
// (Server.Stop, Server.Start: the same port, empty again) or freeze it (Server.Freeze: a Redis
// that accepts connections and never answers).
//
// It imports nothing of caddy-textgen, so any package's tests can use it.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-textgen/textgen/internal/freeport"
	"github.com/caddy-textgen/textgen/internal/tier"
)

// InstallHint is what to run on a machine without redis-server.
const InstallHint = "apt-get update && apt-get install -y redis-server"

// Server is one redis-server process.
type Server struct {
	bin  string
	dir  string
	port int

	mu  sync.Mutex
	cmd *exec.Cmd
	log *os.File
}

// New starts a redis-server on a free loopback port and stops it when the test ends. It fails
// the test when redis-server is missing or does not start (it never skips).
func New(t testing.TB) *Server {
	t.Helper()
	tier.Full(t, "a real redis-server")
	s, err := Start(t.TempDir())
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// Start starts a redis-server whose working directory (and log) is dir.
func Start(dir string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed: install it with `%s`", InstallHint)
	}
	// Outside the ephemeral range, so that no client connection takes the port while the
	// server is stopped and Start finds it free again.
	p, err := freeport.Pick(1)
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, port: p[0]}
	return s, s.Start()
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the redis:// URL of database db on the server.
func (s *Server) URL(db int) string { return fmt.Sprintf("redis://%s/%d", s.Addr(), db) }

// Start starts the server again (after Stop) on the same port, with no data.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--protected-mode", "no")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	s.cmd, s.log = cmd, logf
	// Ready when it answers PING.
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d did not answer: %v\n%s", s.port, err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (its data is gone: no persistence). Safe when stopped.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *Server) stopLocked() error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a frozen server cannot die of SIGKILL later
	err := s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.log.Close()
	s.cmd, s.log = nil, nil
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	return err
}

// Freeze stops the process (SIGSTOP): connections open, nothing answered. Thaw resumes it.
func (s *Server) Freeze() error { return s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server.
func (s *Server) Thaw() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: the server is not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Client is a go-redis client of database 0, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}
