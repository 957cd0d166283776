// Package ollamatest runs a real Ollama server with a tiny generated model, for tests,
// benchmarks and a developer's "dev mode" across the repository, and provides FaultServer, a
// fault-injecting fake for the failures the real server cannot produce on demand.
//
// The core API (EnsureBinary, Start, NewFaultServer) takes no *testing.T, so commands such as
// cmd/tinyollama and a TestMain can use it; StartT and NewFaultServerT are thin wrappers for tests.
package ollamatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/caddy-textgen/textgen/internal/freeport"
)

// DefaultModel is the name the tiny model is registered under unless Options.Model says otherwise.
const DefaultModel = "tiny"

// Options configure Start.
type Options struct {
	// Model is the name the tiny model is registered under. Default "tiny".
	Model string
	// NumPredict is the model's default output length (PARAMETER num_predict). Default 16.
	// The tiny model never stops by itself, so a generation yields exactly this many tokens
	// unless the request sets num_predict.
	NumPredict int
	// NumParallel sets OLLAMA_NUM_PARALLEL. 0: Ollama's default.
	NumParallel int
	// MaxQueue sets OLLAMA_MAX_QUEUE. 0: Ollama's default (512).
	MaxQueue int
	// KeepAlive sets OLLAMA_KEEP_ALIVE. Default "-1": the model stays loaded while the server runs.
	KeepAlive string
	// Port is the loopback port to listen on. 0: a free port.
	Port int
	// Dir is the models folder (OLLAMA_MODELS), kept by Stop. Default: a fresh temporary folder
	// that Stop removes.
	Dir string
	// Env adds environment variables for `ollama serve`, e.g. "OLLAMA_DEBUG=1".
	Env []string
	// Log, if set, also receives the server's log (it always goes to Server.LogPath).
	Log io.Writer
	// SkipPrewarm skips the one-token generation that loads the model before Start returns.
	SkipPrewarm bool
	// StartTimeout bounds start-up, model registration and prewarm. Default 2 minutes.
	StartTimeout time.Duration
}

// Server is a running `ollama serve` with the tiny model registered.
type Server struct {
	URL     string // http://127.0.0.1:PORT
	Host    string // 127.0.0.1:PORT, the form OLLAMA_HOST takes
	Model   string // the registered model name
	Dir     string // the models folder
	LogPath string // the server's log file

	bin     string
	gguf    string
	root    string // temporary folder with log, HOME, Modelfile and default models; removed by Stop
	cmd     *exec.Cmd
	logFile *os.File
	exited  chan struct{}
	waitErr error

	stopOnce sync.Once
	stopErr  error
}

// Start builds Ollama if needed, writes the tiny model if needed, starts `ollama serve` on a
// loopback port with its own models folder, registers the model and loads it with one tiny
// generation. The caller must call Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	if opts.NumPredict == 0 {
		opts.NumPredict = 16
	}
	if opts.KeepAlive == "" {
		opts.KeepAlive = "-1"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	bin, err := EnsureBinary()
	if err != nil {
		return nil, err
	}
	gguf, err := EnsureModelFile()
	if err != nil {
		return nil, err
	}

	// A free port found by listening and closing can be taken by someone else before Ollama
	// binds it; try a few.
	attempts := 1
	if opts.Port == 0 {
		attempts = 3
	}
	for i := 0; ; i++ {
		s, err := start(ctx, bin, gguf, opts)
		if err == nil {
			return s, nil
		}
		if i+1 >= attempts || !errors.Is(err, errAddrInUse) {
			return nil, err
		}
	}
}

var errAddrInUse = errors.New("address already in use")

func start(ctx context.Context, bin, gguf string, opts Options) (*Server, error) {
	port := opts.Port
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	root, err := os.MkdirTemp("", "ollamatest-")
	if err != nil {
		return nil, fmt.Errorf("starting ollama: %w", err)
	}
	s := &Server{
		Host:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Model:   opts.Model,
		Dir:     opts.Dir,
		LogPath: filepath.Join(root, "ollama.log"),
		bin:     bin,
		gguf:    gguf,
		root:    root,
		exited:  make(chan struct{}),
	}
	s.URL = "http://" + s.Host
	if s.Dir == "" {
		s.Dir = filepath.Join(root, "models")
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("starting ollama: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "home"), 0o755); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("starting ollama: %w", err)
	}
	if s.logFile, err = os.Create(s.LogPath); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("starting ollama: %w", err)
	}

	env := s.env(
		"OLLAMA_MODELS="+s.Dir,
		"OLLAMA_KEEP_ALIVE="+opts.KeepAlive,
	)
	if opts.NumParallel > 0 {
		env = append(env, "OLLAMA_NUM_PARALLEL="+strconv.Itoa(opts.NumParallel))
	}
	if opts.MaxQueue > 0 {
		env = append(env, "OLLAMA_MAX_QUEUE="+strconv.Itoa(opts.MaxQueue))
	}
	env = append(env, opts.Env...)

	var logw io.Writer = s.logFile
	if opts.Log != nil {
		logw = io.MultiWriter(s.logFile, opts.Log)
	}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = env
	s.cmd.Dir = root
	s.cmd.Stdout = logw
	s.cmd.Stderr = logw
	// Own process group, so Stop also reaches the runner processes Ollama spawns. If the test
	// binary dies (a test timeout), SIGTERM lets `ollama serve` stop its runners as it exits.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		s.logFile.Close()
		os.RemoveAll(root)
		return nil, fmt.Errorf("starting ollama: %w", err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()

	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.CreateModel(ctx, s.Model, opts.NumPredict); err != nil {
		s.Stop()
		return nil, err
	}
	if !opts.SkipPrewarm {
		if err := s.Prewarm(ctx); err != nil {
			s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// env is the environment for ollama commands: ours without any OLLAMA_* variable of the
// developer's, plus OLLAMA_HOST, a private HOME (Ollama writes its key pair there) and extra.
func (s *Server) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OLLAMA_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "OLLAMA_HOST="+s.Host, "HOME="+filepath.Join(s.root, "home"))
	return append(env, extra...)
}

func (s *Server) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodHead, s.URL+"/", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			log := s.LogTail(4000)
			if strings.Contains(log, "address already in use") {
				return fmt.Errorf("ollama serve on %s: %w", s.Host, errAddrInUse)
			}
			return fmt.Errorf("ollama serve exited before answering (%v); log tail:\n%s", s.waitErr, log)
		case <-ctx.Done():
			return fmt.Errorf("ollama serve did not answer on %s: %w; log tail:\n%s", s.URL, ctx.Err(), s.LogTail(4000))
		case <-tick.C:
		}
	}
}

// CreateModel registers the tiny model under name with `ollama create name -f Modelfile`: a
// TEMPLATE that prints each message's content on a line, PARAMETER num_predict numPredict
// (0: 16), num_thread 1 and num_ctx TinyWindow (the context the server runs it with where a
// request does not say, as on the OpenAI-compatible wire). Tests use it for a second model with
// another length.
func (s *Server) CreateModel(ctx context.Context, name string, numPredict int) error {
	return s.CreateModelWithContext(ctx, name, numPredict, TinyWindow)
}

// CreateModelWithContext is CreateModel with PARAMETER num_ctx numCtx: a server that runs the
// model with a smaller context than its window, for tests of prompts the server cuts.
func (s *Server) CreateModelWithContext(ctx context.Context, name string, numPredict, numCtx int) error {
	if numPredict == 0 {
		numPredict = 16
	}
	// One thread: the model is tiny, and llama.cpp's spinning thread barrier makes two threads
	// crawl when the 2-core machine is busy with other work (a build, a load generator). A
	// frequency penalty: with random weights at a tool's low temperature the model can repeat one
	// token, and Ollama ends a stream after 30 repeats without its done line.
	modelfile := fmt.Sprintf("FROM %s\nTEMPLATE \"\"\"{{ range .Messages }}{{ .Content }}\n{{ end }}\"\"\"\nPARAMETER num_predict %d\nPARAMETER num_thread 1\nPARAMETER num_ctx %d\nPARAMETER frequency_penalty 1\n", s.gguf, numPredict, numCtx)
	path := filepath.Join(s.root, "Modelfile."+sanitize(name))
	if err := os.WriteFile(path, []byte(modelfile), 0o644); err != nil {
		return fmt.Errorf("creating model %s: %w", name, err)
	}
	cmd := exec.CommandContext(ctx, s.bin, "create", name, "-f", path)
	cmd.Env = s.env()
	cmd.Dir = s.root
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ollama create %s: %w\n%s\nserver log tail:\n%s", name, err, tail(out.Bytes(), 2000), s.LogTail(2000))
	}
	return nil
}

// Prewarm loads the model with a one-token generation, so the first test does not pay for it.
func (s *Server) Prewarm(ctx context.Context) error {
	stream := false
	req := &api.ChatRequest{
		Model:    s.Model,
		Messages: []api.Message{{Role: "user", Content: "hello"}},
		Stream:   &stream,
		Options:  map[string]any{"num_predict": 1},
	}
	if err := s.Client().Chat(ctx, req, func(api.ChatResponse) error { return nil }); err != nil {
		return fmt.Errorf("prewarming %s: %w; log tail:\n%s", s.Model, err, s.LogTail(4000))
	}
	return nil
}

// Client returns an official Ollama API client for the server.
func (s *Server) Client() *api.Client {
	u, _ := url.Parse(s.URL)
	return api.NewClient(u, http.DefaultClient)
}

// Exited is closed when the server process has exited.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// LogTail returns at most the last n bytes of the server's log.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(s.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(tail(b, n))
}

// LogCount counts the lines of the server's whole log that contain substr ("truncating input
// prompt": the server cut a prompt to fit its context).
func (s *Server) LogCount(substr string) int {
	b, err := os.ReadFile(s.LogPath)
	if err != nil {
		return -1
	}
	return bytes.Count(b, []byte(substr))
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 seconds), kills any runner process it
// left behind and removes its temporary files (and the models folder if Start created it).
// It is safe to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		pgid := s.cmd.Process.Pid
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			s.stopErr = fmt.Errorf("ollama serve did not stop within 10s after SIGTERM; killed")
		}
		// The group is ours (Setpgid); this reaches runners that outlived the server.
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-s.exited
		s.logFile.Close()
		// A models folder the caller chose lies outside root and is kept.
		os.RemoveAll(s.root)
	})
	return s.stopErr
}

func freePort() (int, error) {
	p, err := freeport.Pick(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ':' || r == '\\' {
			return '_'
		}
		return r
	}, name)
}
