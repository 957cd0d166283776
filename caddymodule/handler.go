package caddymodule

import (
	"crypto/rand"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/pipeline"
)

// ServeHTTP routes the endpoints of the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	reqID := newRequestID()
	if !h.inFlight.Enter() {
		// A request that reached a config that has been replaced (a rare race in a reload).
		e := newError(http.StatusServiceUnavailable, "overloaded", "", "the server is reloading its configuration; retry")
		e.RetryAfter = time.Second
		doorOf(r).writeError(w, reqID, e, -1)
		return nil
	}
	defer h.inFlight.Exit()
	if h.cors(w, r) {
		return nil // a preflight
	}
	switch r.URL.Path {
	case "/api/v1/tools":
		h.serveTools(w, r, reqID)
		return nil
	case openAPIPath:
		serveOpenAPI(w, r, reqID)
		return nil
	case "/api/v1/generate", chatCompletionsPath, modelsPath, "/api/v1/balance", usagePath, "/api/v1/ready", receiptKeysPath, redeemPath:
	default:
		if !strings.HasPrefix(r.URL.Path, generationsPath) && !strings.HasPrefix(r.URL.Path, modelsPath+"/") {
			doorOf(r).writeError(w, reqID, errNotFound, -1)
			return nil
		}
	}
	store, backend := h.store(), h.backend()
	if store == nil || backend == nil {
		// Between the HTTP app's start and the textgen app's (Caddy starts apps in no order),
		// or a ledger that opens later (a database not reachable yet, a disk too full to replay
		// the log): readiness says why.
		if backend != nil && r.URL.Path == "/api/v1/ready" {
			h.serveReady(w, r, reqID, nil, backend)
			return nil
		}
		doorOf(r).writeError(w, reqID, errLedgerUnavailable, -1)
		return nil
	}
	switch r.URL.Path {
	case "/api/v1/generate":
		h.serveGenerate(w, r, reqID, store, backend, generateDoor{})
	case chatCompletionsPath:
		h.serveGenerate(w, r, reqID, store, backend, chatDoor{})
	case "/api/v1/balance":
		h.serveBalance(w, r, reqID, store)
	case usagePath:
		h.serveUsage(w, r, reqID, store)
	case "/api/v1/ready":
		h.serveReady(w, r, reqID, store, backend)
	case receiptKeysPath:
		h.serveReceiptKeys(w, r, reqID, store)
	case redeemPath:
		h.serveRedeem(w, r, reqID, store)
	default:
		if strings.HasPrefix(r.URL.Path, modelsPath) {
			h.serveModels(w, r, reqID, store)
			return nil
		}
		if h.serveGeneration(w, r, reqID, store) {
			// The generation ended before its text did: no client may take the cut text for a
			// whole one (as in generate).
			panic(http.ErrAbortHandler)
		}
	}
	return nil
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newRequestID returns "req_" and 22 random base62 characters (about 131 bits).
func newRequestID() string {
	var raw [22]byte
	_, _ = rand.Read(raw[:])
	b := make([]byte, 4, 26)
	copy(b, "req_")
	for _, c := range raw {
		// 248 = 4*62: drop the biased top values by folding them (the bias left is negligible
		// for an id, which needs uniqueness, not uniformity).
		b = append(b, base62[int(c)%62])
	}
	return string(b)
}

// now is the clock of the package; tests replace it.
var now = time.Now

// generation is the state of one generation, asked for through a door (door.go).
type generation struct {
	h     *Handler
	door  door
	store handlerLedger
	// backend is the model backend of live keys (test keys get a sample).
	backend backends.ModelServers
	w       http.ResponseWriter
	r       *http.Request
	id      string
	start   time.Time
	// caller is who calls (authenticate).
	caller caller
	// ask is what the caller asks for (readRequest), prompt its system prompt and its fit in
	// the model's context (fitContext).
	ask    ask
	prompt prompt
	status int
	credit int64 // credits charged (0 or the hold's price)
	// remaining is the available credit reported to the client, -1 while the key is unknown.
	remaining int64
	stats     backends.Stats
	errKind   string
	logged    bool
	// admission is the places the limits granted (admit), held until the end.
	admission admission
	// hold is the credit reserved for the generation (pipeline.Reserve), until it is settled or
	// voided.
	hold   pipeline.Hold
	queued time.Duration // time waited in the admission queue
	// abort is set when text went out and the generation broke: the response must end without
	// its terminating chunk (HTTP/1.1) or with a stream reset (HTTP/2).
	abort bool
	// trace is the request's spans under Caddy's tracing (tracing.go); zero when off.
	trace reqTrace
}

// serveGenerate answers POST /api/v1/generate. It reads top to bottom through the files of a
// request: auth.go (who calls), request.go (what they ask for), ratelimit.go and slots.go
// (whether they may now), generate.go (the credit and the model), streaming.go (the text on the
// wire). The first stages return what they found (caller, ask, prompt, admission) and their
// refusal; only serveGenerate stores them in the generation, which the later stages, the log
// line, the metrics and the spans read.
func (h *Handler) serveGenerate(w http.ResponseWriter, r *http.Request, reqID string, store handlerLedger, backend backends.ModelServers, d door) {
	g := &generation{h: h, door: d, store: store, backend: backend, w: w, r: r, id: reqID, start: now(), remaining: -1, trace: startTrace(r)}
	defer g.end()
	if !h.intake(g) {
		return
	}
	g.generate()
}

// intake runs the stages before any credit is held: the key, the request, the limits. It stores
// what each found in g and reports whether the generation may go on; a refusal is answered. Its
// frame, which holds the stages' findings on their way into g, is gone before the generation
// streams: every open stream keeps the connection goroutine's stack at its deepest there.
func (h *Handler) intake(g *generation) bool {
	w, r, store, reqID := g.w, g.r, g.store, g.id
	if r.Method != http.MethodPost {
		g.fail(errMethodNotAllowedPOST)
		return false
	}
	t0 := g.trace.now()
	var refused *apiError
	g.remaining, refused = h.authenticate(store, w, r, reqID, &g.caller)
	g.trace.step(spanKeyCheck, t0, g)
	if refused != nil {
		g.fail(refused) // a refused address's 429 is logged as auth_failures (rateLimited)
		return false
	}
	var bad *apiError
	bad = g.door.read(h, w, r, &g.ask)
	if bad == nil {
		bad = keyLimits(g.caller.key.KeyLimits, g.ask.tool, r) // its tools and addresses, before anything is held
	}
	if bad == nil {
		own, err := g.toolBackend()
		if err != nil {
			g.fail(err)
			return false
		}
		g.backend = own
		if c := g.ask.chat; c != nil && c.format != nil && !g.backend.TakesFormat() {
			bad = errFormatNotTaken
		} else {
			g.prompt, bad = h.fitContext(r.Context(), &g.ask, g.backend)
		}
	}
	// Every request with a valid key counts against its key's and account's limits, whatever
	// its outcome; a valid one also against its tool's and takes one of its account's
	// concurrent places: all in one step (one round trip to a Redis limits store).
	t0 = g.trace.now()
	refused = h.admit(w, r, &g.caller, g.ask.tool, g.backend, g.remaining, bad == nil, &g.admission)
	g.trace.step(spanLimits, t0, g)
	if refused != nil {
		if g.admission.unknownKey {
			g.remaining = -1
		}
		g.fail(refused)
		return false
	}
	if bad != nil {
		g.fail(bad)
		return false
	}
	return true
}

// end gives back the request's place among its account's generations, writes its log line and
// metrics, and aborts the response if the generation broke after text went out.
func (g *generation) end() {
	g.admission.slot.Release()      // safe when none is held
	g.admission.hostPlace.Release() // not handed to the backend (a replay, an early refusal)
	g.log()
	g.observe()
	g.trace.finish(g)
	if g.abort {
		panic(http.ErrAbortHandler)
	}
}

// fail answers a stage's refusal e: its status, and the kind of error the log names it by;
// nothing is charged.
func (g *generation) fail(e *apiError) {
	g.status, g.errKind = e.Status, e.logKind()
	g.door.writeError(g.w, g.id, e, g.remaining)
}

// left notes a client that went away before its answer: nothing more is written, and the log
// says 499.
func (g *generation) left() { g.status, g.errKind = 499, "client_gone" }

func (g *generation) internal(what string, err error) {
	g.h.logger.Error(what, zap.String("request_id", g.id), zap.Error(err))
	g.fail(errInternal)
}
