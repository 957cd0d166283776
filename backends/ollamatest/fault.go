package ollamatest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/types/model"

	"github.com/caddy-textgen/textgen/backends/modelname"
)

// FaultMode is what a FaultServer does with a chat request.
type FaultMode int

const (
	// FaultNone streams Pieces pieces (Delay apart; 0: all at once), then the done line. With
	// Delay 0 it is "a backend that answers at once", for benchmarks.
	FaultNone FaultMode = iota
	// FaultErrorAfter streams Pieces pieces, then an {"error": Message} line, as Ollama does when
	// the runner fails mid-generation.
	FaultErrorAfter
	// FaultStall streams Pieces pieces (0: a stall before the first piece), then sends nothing
	// until the client goes away or Stall elapses (then it finishes normally).
	FaultStall
	// FaultMalformed streams Pieces pieces, then a line that is not JSON.
	FaultMalformed
	// FaultDrop streams Pieces pieces, then drops the connection (no done line, no end of the
	// chunked body).
	FaultDrop
	// FaultEndWithoutDone streams Pieces pieces, then ends the response cleanly without a done
	// line: a truncated stream that must not pass for a complete one.
	FaultEndWithoutDone
	// FaultBusy answers 503 with Ollama's "server busy" error, as Ollama does when
	// OLLAMA_MAX_QUEUE is exceeded.
	FaultBusy
	// FaultStatus answers Status with {"error": Message} before any piece.
	FaultStatus
	// FaultNoEndMarker streams Pieces pieces and the finish, but not the OpenAI wire's end
	// marker ("data: [DONE]"), as some OpenAI-compatible servers end; on Ollama's wire it is
	// FaultNone (its done line is the finish).
	FaultNoEndMarker
)

func (m FaultMode) String() string {
	switch m {
	case FaultNone:
		return "none"
	case FaultErrorAfter:
		return "error_after"
	case FaultStall:
		return "stall"
	case FaultMalformed:
		return "malformed"
	case FaultDrop:
		return "drop"
	case FaultEndWithoutDone:
		return "end_without_done"
	case FaultBusy:
		return "busy"
	case FaultStatus:
		return "status"
	case FaultNoEndMarker:
		return "no_end_marker"
	default:
		return fmt.Sprintf("FaultMode(%d)", int(m))
	}
}

// BusyMessage is the error Ollama v0.6.8 answers with (status 503) when its queue is full.
const BusyMessage = "server busy, please try again.  maximum pending requests exceeded"

// FaultConfig is a FaultServer's behaviour for one model.
type FaultConfig struct {
	// Model is the model name this behaviour answers for. Default "tiny". Other names get
	// Ollama's 404 "model not found" (until pulled).
	Model string
	// Mode is the fault. Default FaultNone.
	Mode FaultMode
	// Pieces is the number of pieces before the fault (FaultNone: in all). Default 0.
	Pieces int
	// Piece is the text of every piece. Default "tok ".
	Piece string
	// Numbered appends the piece's index and a space to Piece ("tok0 tok1 ..."), so a client can
	// check that no piece was lost, doubled or reordered.
	Numbered bool
	// Delay is the pause before each piece; 0: pieces are written at once.
	Delay time.Duration
	// Stall bounds FaultStall; 0: until the client goes away.
	Stall time.Duration
	// Status is the status code of FaultStatus. Default 500.
	Status int
	// Message is the error text of FaultErrorAfter and FaultStatus. Default "fault injected".
	Message string
	// RetryAfter, when set, is sent as the Retry-After header (seconds) of FaultBusy and
	// FaultStatus answers (a 429 or 503 of an OpenAI-compatible server).
	RetryAfter int
	// Window, when set, is the model's context window as the server reports it: Ollama's
	// /api/show "llama.context_length", and "max_model_len" in GET /v1/models (as vLLM does).
	Window int
}

// FaultServer is a fake Ollama that injects faults the real server cannot produce on demand.
// It speaks /api/chat (NDJSON streaming), /api/version, /api/tags, /api/show, /api/ps,
// /api/pull (instant, with progress lines) and HEAD /, and, like Ollama, the OpenAI-compatible
// wire: POST /v1/chat/completions (server-sent events, usage before "data: [DONE]") and GET
// /v1/models, with the same faults in that wire's form. Use the real server (Start) for
// everything else.
type FaultServer struct {
	URL string // http://127.0.0.1:PORT

	srv *httptest.Server

	mu       sync.RWMutex
	models   map[string]*faultModel
	last     api.ChatRequest
	lastAuth string

	requests   atomic.Int64
	conns      atomic.Int64
	inFlight   atomic.Int64
	clientGone atomic.Int64
	piecesSent atomic.Int64
}

type faultModel struct {
	cfg FaultConfig
	nd  faultLines // Ollama's NDJSON wire
	sse faultLines // the OpenAI-compatible wire
}

// faultLines are one model's answers in one wire, rendered once.
type faultLines struct {
	piece []byte
	// pieces are the numbered pieces (FaultConfig.Numbered).
	pieces    [][]byte
	done      []byte
	fast      []byte // FaultNone without delay: the whole response
	errLine   []byte // FaultErrorAfter's line
	malformed []byte // FaultMalformed's line
	mediaType string
}

// NewFaultServer starts a FaultServer on a free loopback port with cfg's behaviour for
// cfg.Model. Call Close when done.
func NewFaultServer(cfg FaultConfig) *FaultServer {
	f := newFaultServer(cfg)
	f.srv.Start()
	f.URL = f.srv.URL
	return f
}

// NewFaultServerOn is NewFaultServer on a given address ("127.0.0.1:PORT"), e.g. to bring a
// host back where a backend expects it.
func NewFaultServerOn(addr string, cfg FaultConfig) (*FaultServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fault server: %w", err)
	}
	f := newFaultServer(cfg)
	f.srv.Listener.Close()
	f.srv.Listener = l
	f.srv.Start()
	f.URL = f.srv.URL
	return f, nil
}

func newFaultServer(cfg FaultConfig) *FaultServer {
	f := &FaultServer{models: make(map[string]*faultModel)}
	f.Set(cfg)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/chat", f.chat)
	mux.HandleFunc("POST /v1/chat/completions", f.chatOpenAI)
	mux.HandleFunc("GET /v1/models", f.openaiModels)
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": "0.6.8-fault"})
	})
	mux.HandleFunc("GET /api/tags", f.tags)
	mux.HandleFunc("GET /api/ps", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"models": []any{}})
	})
	mux.HandleFunc("POST /api/show", f.show)
	mux.HandleFunc("POST /api/pull", f.pull)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if r.Method == http.MethodGet {
			w.Write([]byte("Ollama is running"))
		}
	})
	f.srv = httptest.NewUnstartedServer(mux)
	f.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			f.conns.Add(1)
		}
	}
	return f
}

// Set replaces (or adds) the behaviour for cfg.Model; requests already running keep the old one.
func (f *FaultServer) Set(cfg FaultConfig) {
	if cfg.Model == "" {
		cfg.Model = DefaultModel
	}
	if cfg.Piece == "" {
		cfg.Piece = "tok "
	}
	if cfg.Status == 0 {
		cfg.Status = http.StatusInternalServerError
	}
	if cfg.Message == "" {
		cfg.Message = "fault injected"
	}
	m := &faultModel{cfg: cfg, nd: ndjsonLines(cfg), sse: openaiLines(cfg)}
	f.mu.Lock()
	f.models[modelname.Normalize(cfg.Model)] = m
	f.mu.Unlock()
}

// Close stops the server and closes all its connections.
func (f *FaultServer) Close() {
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// Requests is the number of chat requests received.
func (f *FaultServer) Requests() int64 { return f.requests.Load() }

// Connections is the number of connections accepted: a client that reuses its connections
// keeps it low.
func (f *FaultServer) Connections() int64 { return f.conns.Load() }

// InFlight is the number of chat requests being answered now.
func (f *FaultServer) InFlight() int64 { return f.inFlight.Load() }

// ClientGone is the number of chat requests whose client went away (cancelled, closed the
// connection) before the answer was complete: how a test sees that cancelling reached the server.
func (f *FaultServer) ClientGone() int64 { return f.clientGone.Load() }

// PiecesSent is the number of pieces written and flushed to clients by paced streams (Delay > 0
// or a fault mode), over all requests: a client that stops a generation must stop it soon.
func (f *FaultServer) PiecesSent() int64 { return f.piecesSent.Load() }

// LastRequest is the last chat request received.
func (f *FaultServer) LastRequest() api.ChatRequest {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.last
}

func (f *FaultServer) lookup(name string) *faultModel {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.models[modelname.Normalize(name)]
}

func (f *FaultServer) chat(w http.ResponseWriter, r *http.Request) {
	var req api.ChatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	f.serve(w, r, req, func(m *faultModel) *faultLines { return &m.nd }, func(msg string) any { return map[string]string{"error": msg} })
}

// serve answers one chat request in a wire: lines picks the wire's rendering of a model, errBody
// the wire's error body for answers before any model is found.
func (f *FaultServer) serve(w http.ResponseWriter, r *http.Request, req api.ChatRequest, lines func(*faultModel) *faultLines, errBody func(string) any) {
	f.requests.Add(1)
	f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	f.mu.Lock()
	f.last = req
	f.mu.Unlock()

	m := f.lookup(req.Model)
	if m == nil {
		writeJSON(w, http.StatusNotFound, errBody(fmt.Sprintf("model %q not found, try pulling it first", req.Model)))
		return
	}
	cfg := m.cfg
	wl := lines(m)
	if cfg.RetryAfter > 0 && (cfg.Mode == FaultBusy || cfg.Mode == FaultStatus) {
		w.Header().Set("Retry-After", strconv.Itoa(cfg.RetryAfter))
	}
	switch cfg.Mode {
	case FaultBusy:
		writeJSON(w, http.StatusServiceUnavailable, errBody(BusyMessage))
		return
	case FaultStatus:
		writeJSON(w, cfg.Status, errBody(cfg.Message))
		return
	}

	w.Header().Set("Content-Type", wl.mediaType)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	ctx := r.Context()
	gone := func(err error) {
		if err != nil || ctx.Err() != nil {
			f.clientGone.Add(1)
		}
	}

	if wl.fast != nil {
		_, err := w.Write(wl.fast)
		gone(err)
		return
	}
	// Like Ollama (gin's Stream in server/routes.go), the headers go out with the first piece:
	// a client still waits for them while the model loads and evaluates the prompt.
	for i := 0; i < cfg.Pieces; i++ {
		if !sleep(ctx, cfg.Delay) {
			gone(ctx.Err())
			return
		}
		line := wl.piece
		if wl.pieces != nil {
			line = wl.pieces[i]
		}
		if _, err := w.Write(line); err != nil {
			gone(err)
			return
		}
		if err := rc.Flush(); err != nil {
			gone(err)
			return
		}
		f.piecesSent.Add(1)
	}

	var tailLine []byte
	switch cfg.Mode {
	case FaultNone:
		tailLine = wl.done
	case FaultNoEndMarker:
		tailLine = bytes.TrimSuffix(wl.done, []byte("data: [DONE]\n\n"))
	case FaultErrorAfter:
		tailLine = wl.errLine
	case FaultStall:
		if cfg.Stall == 0 {
			<-ctx.Done()
			gone(ctx.Err())
			return
		}
		if !sleep(ctx, cfg.Stall) {
			gone(ctx.Err())
			return
		}
		tailLine = wl.done
	case FaultMalformed:
		tailLine = wl.malformed
	case FaultDrop:
		// Aborting the handler closes the connection without ending the chunked body.
		panic(http.ErrAbortHandler)
	case FaultEndWithoutDone:
		return
	}
	_, err := w.Write(tailLine)
	if err == nil {
		err = rc.Flush()
	}
	gone(err)
}

func (f *FaultServer) tags(w http.ResponseWriter, r *http.Request) {
	f.mu.RLock()
	var models []api.ListModelResponse
	for _, m := range f.models {
		name := model.ParseName(m.cfg.Model).DisplayShortest() // "tiny:latest", as Ollama lists it
		models = append(models, api.ListModelResponse{Name: name, Model: name, Size: 1})
	}
	f.mu.RUnlock()
	writeJSON(w, http.StatusOK, api.ListResponse{Models: models})
}

func (f *FaultServer) show(w http.ResponseWriter, r *http.Request) {
	var req api.ShowRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	name := req.Model
	if name == "" {
		name = req.Name
	}
	m := f.lookup(name)
	if m == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("model '%s' not found", name)})
		return
	}
	show := api.ShowResponse{Details: api.ModelDetails{Format: "gguf", Family: "llama"}}
	if m.cfg.Window > 0 {
		show.ModelInfo = map[string]any{"general.architecture": "llama", "llama.context_length": m.cfg.Window}
	}
	writeJSON(w, http.StatusOK, show)
}

// pull "downloads" any model at once, with a few progress lines, and then serves it with
// FaultNone and 8 pieces.
func (f *FaultServer) pull(w http.ResponseWriter, r *http.Request) {
	var req api.PullRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	name := req.Model
	if name == "" {
		name = req.Name
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	const total = 4 << 20
	lines := []api.ProgressResponse{{Status: "pulling manifest"}}
	for done := int64(0); done <= total; done += total / 4 {
		lines = append(lines, api.ProgressResponse{Status: "pulling 0123456789ab", Digest: "sha256:0123456789ab", Total: total, Completed: done})
	}
	lines = append(lines, api.ProgressResponse{Status: "verifying sha256 digest"}, api.ProgressResponse{Status: "success"})
	for _, l := range lines {
		w.Write(mustLine(l))
	}
	f.Set(FaultConfig{Model: name, Pieces: 8})
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func mustLine(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own fixed types are marshalled
	}
	return append(b, '\n')
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(mustLine(v))
}
