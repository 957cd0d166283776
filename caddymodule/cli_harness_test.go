package caddymodule

// The CLI harness: the caddy binary built with this plugin (by xcaddy.sh, once per test binary),
// real `caddy run` servers on free loopback ports with a real Badger ledger in a temporary
// directory, and the `caddy textgen ...` commands run as separate processes against them.
// Nothing here talks to a model server: the admin API does not need one.

import (
	"bytes"
	"encoding/json"
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
)

var (
	cliBuildOnce sync.Once
	cliBin       string
	cliBuildErr  error
)

// cliBinary builds the caddy binary once per test binary. It lives in the repository's .xcaddy
// folder (ignored by git), built under a temporary name and renamed into place, so a concurrent
// test binary keeps running the file it started.
func cliBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the caddy binary; not in -short mode")
	}
	cliBuildOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			cliBuildErr = err
			return
		}
		dir := filepath.Join(root, ".xcaddy")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			cliBuildErr = err
			return
		}
		final := filepath.Join(dir, "caddy-clitest")
		tmp := fmt.Sprintf("%s.%d", final, os.Getpid())
		cmd := exec.Command("./xcaddy.sh", "build")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CADDY_OUT="+tmp)
		out, err := cmd.CombinedOutput()
		if err != nil {
			os.Remove(tmp)
			cliBuildErr = fmt.Errorf("CADDY_OUT=%s ./xcaddy.sh build: %v\n%s", tmp, err, out)
			return
		}
		if err := os.Rename(tmp, final); err != nil {
			cliBuildErr = err
			return
		}
		cliBin = final
	})
	if cliBuildErr != nil {
		t.Fatalf("building caddy: %v", cliBuildErr)
	}
	return cliBin
}

// repoRoot is the module's root: the folder of `go env GOMOD`, else the parent of this package.
func repoRoot() (string, error) {
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		if gomod := strings.TrimSpace(string(out)); gomod != "" && gomod != os.DevNull {
			return filepath.Dir(gomod), nil
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "xcaddy.sh")); err != nil {
		return "", fmt.Errorf("cannot find the repository root (no xcaddy.sh in %s)", root)
	}
	return root, nil
}

// cliFreePort returns a loopback port nothing listens on right now (never 2999, caddytest's).
func cliFreePort(t testing.TB) int {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port != 2999 {
			return port
		}
	}
}

// cliEnv isolates a caddy process from the user's Caddy: its own HOME and XDG folders, so it
// neither reads nor writes ~/.config/caddy (autosave) or ~/.local/share/caddy (storage).
func cliEnv(home string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "CADDY_ADMIN":
			continue
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

// cliServer is one `caddy run` process.
type cliServer struct {
	t      testing.TB
	bin    string
	admin  string // HOST:PORT of the admin API
	http   string // HOST:PORT of the site
	config string // its Caddyfile
	ledger string // "" when the config has no textgen handler
	home   string
	cmd    *exec.Cmd
	logs   *syncBuffer
	done   chan struct{}
	err    error // the process's exit error, after done
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

// startCLIServer runs caddy with a textgen site whose ledger is ledgerDir (or, when ledgerDir is
// empty, a site without textgen), and waits until the admin API answers.
func startCLIServer(t *testing.T, ledgerDir string) *cliServer {
	t.Helper()
	site := `respond "no textgen here" 404`
	if ledgerDir != "" {
		site = fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama http://127.0.0.1:1\n\t}", ledgerDir)
	}
	return startCaddyProcess(t, site, ledgerDir)
}

// startCaddyProcess runs the built caddy binary with one site block (site) on free ports and
// waits until its admin API answers (for ledgerDir's ledger, when it is not empty).
func startCaddyProcess(t testing.TB, site, ledgerDir string) *cliServer {
	t.Helper()
	bin := cliBinary(t)
	work := t.TempDir()
	adminPort, httpPort, httpsPort := cliFreePort(t), cliFreePort(t), cliFreePort(t)
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
	s := &cliServer{
		t: t, bin: bin, admin: fmt.Sprintf("127.0.0.1:%d", adminPort), http: fmt.Sprintf("127.0.0.1:%d", httpPort), ledger: ledgerDir, config: cfgPath,
		home: filepath.Join(work, "home"), logs: &syncBuffer{}, done: make(chan struct{}),
	}
	s.cmd = exec.Command(bin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	s.cmd.Dir = work
	s.cmd.Env = cliEnv(s.home)
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
			t.Logf("caddy log (%s):\n%s", s.admin, s.logs.String())
		}
	})
	s.waitReady()
	return s
}

// waitReady polls the admin API until it answers for the ledger (or, without one, at all). The
// bound is a safety net for a server that never comes up, not a timing assertion.
func (s *cliServer) waitReady() {
	s.t.Helper()
	path := "/config/"
	if s.ledger != "" {
		path = "/textgen/ledger/verify"
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for range 1200 {
		select {
		case <-s.done:
			s.t.Fatalf("caddy exited before its admin API answered: %v\n%s", s.err, s.logs.String())
		default:
		}
		resp, err := client.Get("http://" + s.admin + path)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("caddy's admin API at %s did not answer\n%s", s.admin, s.logs.String())
}

// generate sends one generate request with key and returns its status after reading the whole
// response (a test key streams a fixed sample without calling any model).
func (s *cliServer) generate(key, tool string) int {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.http+"/api/v1/generate",
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

// stop stops the server the way an operator does (SIGINT: a graceful shutdown that closes the
// ledger) and waits for it to exit.
func (s *cliServer) stop() {
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

// cliResult is one finished command.
type cliResult struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("caddy %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// runCaddy runs the binary with args and returns its output and exit code.
func runCaddy(t testing.TB, home string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(cliBinary(t), args...)
	cmd.Env = cliEnv(home)
	cmd.Dir = home
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running caddy %v: %v", args, err)
	}
	return res
}

// textgen runs `caddy textgen <args> --address <this server>`.
func (s *cliServer) textgen(args ...string) cliResult {
	s.t.Helper()
	if err := os.MkdirAll(s.home, 0o755); err != nil {
		s.t.Fatal(err)
	}
	return runCaddy(s.t, s.home, append(append([]string{"textgen"}, args...), "--address", s.admin)...)
}

// json runs a command with --json, requires success, and returns the one JSON object it printed.
func (s *cliServer) json(args ...string) map[string]any {
	s.t.Helper()
	return mustOneJSON(s.t, s.textgen(append(args, "--json")...))
}

// mustOneJSON requires exit 0 and stdout to be exactly one JSON object.
func mustOneJSON(t testing.TB, res cliResult) map[string]any {
	t.Helper()
	if res.code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	dec := json.NewDecoder(strings.NewReader(res.stdout))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, res)
	}
	if rest, _ := io.ReadAll(dec.Buffered()); strings.TrimSpace(string(rest)) != "" {
		t.Fatalf("stdout has more than one JSON object: %q\n%s", rest, res)
	}
	return obj
}

// mustFail requires a non-zero exit (exactly code, when code > 0), nothing on stdout, and an
// error on stderr that contains every one of want.
func mustFail(t *testing.T, res cliResult, code int, want ...string) {
	t.Helper()
	if res.code == 0 || (code > 0 && res.code != code) {
		t.Fatalf("want exit %d (non-zero)\n%s", code, res)
	}
	if strings.TrimSpace(res.stdout) != "" {
		t.Errorf("a failed command printed on stdout\n%s", res)
	}
	for _, w := range want {
		if !strings.Contains(res.stderr, w) {
			t.Errorf("stderr does not say %q\n%s", w, res)
		}
	}
}

// jsonStr, jsonNum, jsonBool and jsonList read fields of a decoded JSON object.
func jsonStr(t testing.TB, obj map[string]any, key string) string {
	t.Helper()
	v, ok := obj[key].(string)
	if !ok {
		t.Fatalf("field %q is not a string in %v", key, obj)
	}
	return v
}

func jsonNum(t testing.TB, obj map[string]any, key string) int64 {
	t.Helper()
	v, ok := obj[key].(json.Number)
	if !ok {
		t.Fatalf("field %q is not a number in %v", key, obj)
	}
	n, err := v.Int64()
	if err != nil {
		t.Fatalf("field %q: %v", key, err)
	}
	return n
}

func jsonBool(t testing.TB, obj map[string]any, key string) bool {
	t.Helper()
	v, ok := obj[key].(bool)
	if !ok {
		t.Fatalf("field %q is not a boolean in %v", key, obj)
	}
	return v
}

func jsonList(t *testing.T, obj map[string]any, key string) []map[string]any {
	t.Helper()
	raw, ok := obj[key].([]any)
	if !ok {
		t.Fatalf("field %q is not a list in %v", key, obj)
	}
	out := make([]map[string]any, 0, len(raw))
	for _, v := range raw {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("field %q has a non-object item %v", key, v)
		}
		out = append(out, m)
	}
	return out
}
