// Package caddyproc runs the real thing for tests: the caddy binary built with this plugin (by
// xcaddy.sh, once per test binary), `caddy run` processes on free loopback ports with a real
// Badger ledger in a temporary directory, and the `caddy textgen ...` commands as separate
// processes against them. Nothing here talks to a model server: the admin API does not need
// one; a test that generates configures its own backend in the site it passes to Start.
//
// It is for tests only (every function takes a testing.TB); the operator package's CLI tests and
// caddymodule's process-level tests (kill, disk full, instances, validate, benchmarks) share it.
package caddyproc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/internal/freeport"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds the caddy binary once per test binary and returns its path. It lives in the
// repository's .xcaddy folder (ignored by git), built under a temporary name and renamed into
// place, so a concurrent test binary keeps running the file it started; TEXTGEN_CADDY_BIN names
// one built already instead. It skips in -short mode.
func Binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the caddy binary; not in -short mode")
	}
	buildOnce.Do(func() {
		// A script that runs test binaries again and again builds caddy once and names it.
		if bin := os.Getenv("TEXTGEN_CADDY_BIN"); bin != "" {
			binPath = bin
			return
		}
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir := filepath.Join(root, ".xcaddy")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		final := filepath.Join(dir, "caddy-clitest")
		tmp := fmt.Sprintf("%s.%d", final, os.Getpid())
		// The binary an earlier test binary built, copied to tmp: go build keeps an output whose
		// build ID is what it would link, so an unchanged caddy is not linked again (seconds
		// instead of the link's quarter of a minute). A stale or partial copy is linked over.
		_ = copyFile(final, tmp)
		cmd := exec.Command("./xcaddy.sh", "build")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CADDY_OUT="+tmp)
		out, err := cmd.CombinedOutput()
		if err != nil {
			os.Remove(tmp)
			buildErr = fmt.Errorf("CADDY_OUT=%s ./xcaddy.sh build: %v\n%s", tmp, err, out)
			return
		}
		if err := os.Rename(tmp, final); err != nil {
			buildErr = err
			return
		}
		binPath = final
	})
	if buildErr != nil {
		t.Fatalf("building caddy: %v", buildErr)
	}
	return binPath
}

// copyFile copies the file src to dst, executable.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// repoRoot is the module's root: the folder of `go env GOMOD`, else the nearest folder above the
// working directory (the test's package) that has xcaddy.sh.
func repoRoot() (string, error) {
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		if gomod := strings.TrimSpace(string(out)); gomod != "" && gomod != os.DevNull {
			return filepath.Dir(gomod), nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "xcaddy.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (no xcaddy.sh above the working directory)")
		}
		dir = parent
	}
}

// FreePort returns a loopback port nothing listens on right now.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Pick(1)
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}

// env isolates a caddy process from the user's Caddy: its own HOME and XDG folders, so it
// neither reads nor writes ~/.config/caddy (autosave) or ~/.local/share/caddy (storage).
// TEXTGEN_CADDY_GOMEMLIMIT becomes the GOMEMLIMIT of the caddy processes only (the benchmarks'
// memory limit of the server, as Caddy sets from a container's memory limit), not of the test
// process that runs the load.
func env(home string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "CADDY_ADMIN", "GOMEMLIMIT":
			continue
		case "TEXTGEN_CADDY_GOMEMLIMIT":
			kv = "GOMEMLIMIT=" + v
		}
		env = append(env, kv)
	}
	return append(env,
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, "config"),
		"XDG_DATA_HOME="+filepath.Join(home, "data"),
		"XDG_CACHE_HOME="+filepath.Join(home, "cache"),
	)
}

// Server is one `caddy run` process.
type Server struct {
	Admin  string // HOST:PORT of the admin API
	HTTP   string // HOST:PORT of the site
	Config string // its Caddyfile
	Ledger string // the ledger directory Start waited for; "" for none
	Home   string // HOME of the process, and of the commands run against it

	t    testing.TB
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
	err  error // the process's exit error, after done
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logDigest is what a failed test shows of a server's log: all of it with -v; otherwise its
// warnings and errors (the first 6) and its last 3 lines, with a count of what was left out, so
// that the failure's own message stays in sight at the end of a long run's output (CI shows its
// tail). A test that sent thousands of requests would otherwise bury it under their log lines.
func logDigest(log string, all bool) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	if all || len(lines) <= 10 {
		return strings.Join(lines, "\n")
	}
	const keepWarnings, keepLast = 6, 3
	var out []string
	last := len(lines) - keepLast
	for _, l := range lines[:last] {
		if len(out) < keepWarnings && !strings.Contains(l, `"level":"info"`) && !strings.Contains(l, `"level":"debug"`) {
			out = append(out, l)
		}
	}
	out = append(out, fmt.Sprintf("... %d lines left out (go test -v shows them all)", last-len(out)))
	return strings.Join(append(out, lines[last:]...), "\n")
}

// Start runs the built caddy binary with one site block (site) on free ports and waits until its
// admin API answers (for ledgerDir's ledger, when it is not empty). The process is killed at the
// end of the test, and its log shown when the test failed.
func Start(t testing.TB, site, ledgerDir string) *Server {
	t.Helper()
	return StartEnv(t, site, ledgerDir)
}

// StartEnv is Start with more environment variables (NAME=value) for the caddy process only,
// such as OpenTelemetry's exporter settings: the test process's own environment is untouched.
func StartEnv(t testing.TB, site, ledgerDir string, extraEnv ...string) *Server {
	t.Helper()
	bin := Binary(t)
	work := t.TempDir()
	// one Pick of three: separate picks each free their port before the next, and may repeat it
	ports, err := freeport.Pick(3)
	if err != nil {
		t.Fatal(err)
	}
	adminPort, httpPort, httpsPort := ports[0], ports[1], ports[2]
	caddyfile := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	http_port %d
	https_port %d
	auto_https off
	persist_config off
}
http://127.0.0.1:%d {
	%s
}
`, adminPort, httpPort, httpsPort, httpPort, site)
	cfgPath := filepath.Join(work, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Server{
		Admin: fmt.Sprintf("127.0.0.1:%d", adminPort), HTTP: fmt.Sprintf("127.0.0.1:%d", httpPort),
		Config: cfgPath, Ledger: ledgerDir, Home: filepath.Join(work, "home"),
		t: t, logs: &syncBuffer{}, done: make(chan struct{}),
	}
	s.cmd = exec.Command(bin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	s.cmd.Dir = work
	s.cmd.Env = append(env(s.Home), extraEnv...)
	if err := pin(s.cmd); err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting caddy: %v", err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("caddy log (%s):\n%s", s.Admin, logDigest(s.logs.String(), testing.Verbose()))
		}
	})
	s.waitReady()
	return s
}

// waitReady polls the admin API until it answers for the ledger (or, without one, at all), and
// then the site's port until it takes connections: Caddy starts its apps one after the other,
// in no fixed order, so the ledger may answer before the HTTP server listens. The bound is a
// safety net for a server that never comes up, not a timing assertion.
func (s *Server) waitReady() {
	s.t.Helper()
	path := "/config/"
	if s.Ledger != "" {
		path = "/textgen/ledger/verify"
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for range 1200 {
		select {
		case <-s.done:
			s.t.Fatalf("caddy exited before its admin API answered: %v\n%s", s.err, s.logs.String())
		default:
		}
		resp, err := client.Get("http://" + s.Admin + path)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.waitListening()
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("caddy's admin API at %s did not answer\n%s", s.Admin, s.logs.String())
}

// waitListening waits until the site's port takes connections.
func (s *Server) waitListening() {
	s.t.Helper()
	for range 1200 {
		select {
		case <-s.done:
			s.t.Fatalf("caddy exited before its site listened: %v\n%s", s.err, s.logs.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", s.HTTP, 5*time.Second); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("caddy's site at %s never listened\n%s", s.HTTP, s.logs.String())
}

// Pid is the process id of the server.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Generate sends one generate request with key and returns its status after reading the whole
// response (a test key streams a fixed sample without calling any model).
func (s *Server) Generate(key, tool string) int {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.HTTP+"/api/v1/generate",
		strings.NewReader(fmt.Sprintf(`{"tool":%q,"input":"Ask for the invoice","language":"en"}`, tool)))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("generate: %v", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		s.t.Fatalf("generate: reading the response: %v", err)
	}
	return resp.StatusCode
}

// Stop stops the server the way an operator does (SIGINT: a graceful shutdown that closes the
// ledger) and waits for it to exit.
func (s *Server) Stop() {
	s.t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		_ = s.cmd.Process.Kill()
		<-s.done
		s.t.Fatalf("caddy did not stop on SIGINT\n%s", s.logs.String())
	}
}

// Kill kills the server (SIGKILL: no shutdown at all, as a crash) and waits for it to exit.
func (s *Server) Kill() {
	s.t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		s.t.Fatal(err)
	}
	<-s.done
}

// Textgen runs `caddy textgen <args> --address <this server>`.
func (s *Server) Textgen(args ...string) Result {
	s.t.Helper()
	if err := os.MkdirAll(s.Home, 0o755); err != nil {
		s.t.Fatal(err)
	}
	return Run(s.t, s.Home, append(append([]string{"textgen"}, args...), "--address", s.Admin)...)
}

// JSON runs a command with --json, requires success, and returns the one JSON object it printed.
func (s *Server) JSON(args ...string) map[string]any {
	s.t.Helper()
	return MustOneJSON(s.t, s.Textgen(append(args, "--json")...))
}
