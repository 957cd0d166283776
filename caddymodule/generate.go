package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/catalog"
	"github.com/caddy-textgen/textgen/ledger"
)

// now is the clock of the package; tests replace it.
var now = time.Now

// generation is the state of one POST /api/v1/generate.
type generation struct {
	h      *Handler
	w      http.ResponseWriter
	r      *http.Request
	id     string
	start  time.Time
	key    ledger.Key
	acct   ledger.Account
	req    genRequest
	tool   *toolRuntime
	lang   string
	sse    bool
	idem   string // Idempotency-Key, if sent
	status int
	credit int64 // credits charged (0 or 1)
	// remaining is the available credit reported to the client, -1 while the key is unknown.
	remaining int64
	stats     backends.Stats
	errKind   string
	logged    bool
	// states are the rate limits this request was counted against, for the RateLimit headers.
	states  [4]limitState
	nstates int
	// slotHeld: the request holds one of its account's concurrent places (released at the end).
	slotHeld bool
	// holding: a credit is reserved and not yet settled or voided (the holds_open gauge).
	holding bool
	queued  time.Duration // time waited in the admission queue
	// abort is set when text went out and the generation broke: the response must end without
	// its terminating chunk (HTTP/1.1) or with a stream reset (HTTP/2).
	abort bool
}

func (h *Handler) serveGenerate(w http.ResponseWriter, r *http.Request, reqID string) {
	g := &generation{h: h, w: w, r: r, id: reqID, start: now(), remaining: -1, sse: wantsSSE(r)}
	defer func() {
		if g.slotHeld {
			h.lim.slots.release(g.acct.ID)
		}
		g.log()
		g.observe()
		if g.abort {
			panic(http.ErrAbortHandler)
		}
	}()
	if r.Method != http.MethodPost {
		g.fail(errMethodNotAllowedPOST)
		return
	}
	if !g.authenticate() {
		return
	}
	// Every request with a valid key counts against its key's and account's limits, whatever
	// its outcome; checked before the body is read, so a client over its limit costs little.
	if !g.limitRate(h.lim.global) {
		return
	}
	if e := checkContentType(r); e != nil {
		g.fail(e)
		return
	}
	buf, e := g.readBody()
	if e != nil {
		g.fail(e)
		return
	}
	body := buf.Bytes()
	g.req, e = parseGenRequest(body)
	if e == nil {
		e = g.validate()
	}
	var fingerprint string
	if e == nil {
		g.idem = r.Header.Get("Idempotency-Key")
		if g.idem != "" {
			sum := sha256.Sum256(body)
			fingerprint = hex.EncodeToString(sum[:])
		}
	}
	bodyPool.Put(buf)
	if e != nil {
		g.fail(e)
		return
	}
	if !g.limitRate(h.lim.tools[g.tool.Slug]) || !g.takeSlot() {
		return
	}
	if g.idem != "" && !g.beginIdempotent(fingerprint) {
		return
	}
	g.run()
	if g.idem != "" {
		g.finishIdempotent()
	}
}

// authenticate checks the X-API-Key header and the account (see Handler.checkKey).
func (g *generation) authenticate() bool {
	kc, e := g.h.checkKey(g.h.store(), g.w, g.r, g.id)
	g.key, g.acct, g.remaining = kc.key, kc.acct, kc.available
	if e != nil {
		if kc.authLimited {
			g.errKind = "auth_failures"
		}
		g.fail(e)
		return false
	}
	return true
}

// validate checks the values of the fields (their presence and types were checked by parsing).
func (g *generation) validate() *apiError {
	req := &g.req
	tool, ok := g.h.tools[req.Tool]
	if !ok {
		return newError(http.StatusBadRequest, "unknown_tool", "tool",
			fmt.Sprintf("tool %q is not one of the %d tools; see GET /api/v1/tools", truncate(req.Tool, 64), len(g.h.tools)))
	}
	g.tool = tool
	tag, name, ok := g.h.languages.Match(req.Language)
	if !ok {
		return newError(http.StatusBadRequest, "unsupported_language", "language",
			fmt.Sprintf("language %q is not supported; use a BCP 47 tag such as de, en, tr or pt-BR (GET /api/v1/tools lists them)", truncate(req.Language, 64)))
	}
	g.lang = tag
	req.Language = name
	if req.seen&fieldTone != 0 && !catalog.IsTone(req.Tone) {
		return newError(http.StatusBadRequest, "invalid_tone", "tone",
			fmt.Sprintf("tone %q is not allowed; use one of %s, or leave it out", truncate(req.Tone, 64), strings.Join(catalog.Tones, ", ")))
	}
	if strings.TrimSpace(req.Input) == "" {
		return newError(http.StatusBadRequest, "empty_input", "input", "input is empty; send the text the tool should work on")
	}
	if n := utf8.RuneCountInString(req.Input); n > tool.maxInputChars {
		return newError(http.StatusRequestEntityTooLarge, "input_too_large", "input",
			fmt.Sprintf("input has %d characters; the tool %s accepts at most %d", n, tool.Slug, tool.maxInputChars))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// run reserves a credit and streams the generation. The reservation is made in memory, in
// commit order, without waiting for the disk (ledger.Reserve): a hold lost to a crash charges
// nothing, and the settle is durable only together with the hold before it. So the call to the
// model never waits for a disk sync, and a client without credit never makes the model work.
func (g *generation) run() {
	h := g.h
	bg := context.WithoutCancel(g.r.Context())
	var backend backends.Backend = h.backend()
	var slot *backends.Slot
	if g.key.Mode == ledger.Test {
		backend = sampleBackend{tool: g.tool.Slug, lang: g.lang}
	} else {
		if g.remaining == 0 {
			// No credit: answer at once rather than after a wait in the admission queue.
			g.fail(g.insufficient())
			return
		}
		// Admission before the reservation: a request the model hosts cannot take is refused
		// (or waits) without holding a credit.
		if adm, ok := backend.(admitter); ok {
			var err error
			if slot, err = adm.Admit(g.r.Context()); err != nil {
				g.refuseAdmission(err)
				return
			}
			defer slot.Release() // Generate releases it; this covers the returns before
			if slot.Waited > 0 {
				g.queued = slot.Waited
				metrics.queueWait.Observe(slot.Waited.Seconds())
			}
		}
	}

	t0 := time.Now()
	res, err := h.store().Reserve(bg, ledger.HoldRequest{
		AccountID: g.acct.ID, Mode: g.key.Mode, RequestID: g.id, KeyID: g.key.ID, Tool: g.tool.Slug,
		TTL: time.Duration(h.HoldTTL),
	})
	metrics.ledgerOps.WithLabelValues("reserve").Observe(time.Since(t0).Seconds())
	switch {
	case errors.Is(err, ledger.ErrInsufficientCredits):
		g.remaining = 0
		g.fail(g.insufficient())
		return
	case errors.Is(err, ledger.ErrAccountDisabled):
		g.fail(errAccountDisabled)
		return
	case err != nil:
		g.internal("holding credit", err)
		return
	}
	g.remaining = res.Available
	g.holding = true
	metrics.holdsOpen.Inc()

	genCtx, cancel := context.WithDeadline(g.r.Context(), g.start.Add(time.Duration(h.GenerationTimeout)))
	defer cancel()
	s := &streamer{g: g, rc: http.NewResponseController(g.w)}
	system := catalog.BuildSystem(g.tool.Tool, g.lang, g.req.Language, g.req.Tone)
	if h.LogPrompts {
		h.logger.Debug("prompt", zap.String("request_id", g.id), zap.String("system", system), zap.String("input", g.req.Input))
	}
	genStart := time.Now()
	stats, gerr := backend.Generate(genCtx, backends.Request{
		Model:             g.tool.model,
		System:            system,
		Prompt:            g.req.Input,
		Temperature:       g.tool.temperature,
		MaxTokens:         g.tool.maxOutputTokens,
		NumCtx:            h.NumCtx,
		FirstPieceTimeout: time.Duration(h.FirstPieceTimeout),
		IdleTimeout:       time.Duration(h.IdleTimeout),
		Slot:              slot,
	}, s.emit)
	g.stats = stats
	if s.started {
		metrics.timeToFirst.Observe(stats.TimeToFirst.Seconds())
		metrics.generation.Observe(time.Since(genStart).Seconds())
	}
	if stats.OutputTokens > 0 {
		metrics.outputTokens.WithLabelValues(g.tool.Slug).Add(float64(stats.OutputTokens))
	}
	g.finish(s, gerr)
}

// admitter is a backend with admission control (backends.Ollama).
type admitter interface {
	Admit(ctx context.Context) (*backends.Slot, error)
}

// refuseAdmission answers a request the model hosts could not take: 503 overloaded (queue full
// or wait too long) or backend_unavailable; nothing was reserved.
func (g *generation) refuseAdmission(err error) {
	if backends.KindOf(err) == backends.KindCanceled {
		g.errKind = "client_gone" // the client left while queued
		g.status = 499
		return
	}
	reason := ""
	switch {
	case errors.Is(err, backends.ErrQueueFull):
		reason = "queue_full"
	case errors.Is(err, backends.ErrQueueTimeout):
		reason = "queue_timeout"
	case backends.KindOf(err) == backends.KindOverloaded:
		reason = "overloaded"
	}
	e := g.backendError(err)
	if reason != "" {
		metrics.rejections.WithLabelValues(reason).Inc()
		g.errKind = reason
	} else {
		metrics.backendErrors.WithLabelValues(g.errKind).Inc()
	}
	g.fail(e)
}

// finish resolves the hold and ends the response according to CONTRACT section 2.
func (g *generation) finish(s *streamer, gerr error) {
	h := g.h
	bg := context.WithoutCancel(g.r.Context())
	kind := backends.KindOf(gerr)
	// Only the client's leaving (not our own deadline) lets a cut-off generation be charged.
	clientGone := gerr != nil && (s.writeErr != nil || ctxDone(g.r.Context()))
	if gerr != nil && !clientGone {
		metrics.backendErrors.WithLabelValues(kind.String()).Inc()
	}
	switch {
	case gerr == nil && s.started, clientGone && s.delivered:
		// Complete, or the client left after text was delivered: the charge stands.
		t0 := time.Now()
		res, err := h.store().Settle(bg, g.acct.ID, g.id)
		metrics.ledgerOps.WithLabelValues("settle").Observe(time.Since(t0).Seconds())
		g.resolved()
		if err == nil {
			metrics.credits.WithLabelValues("settled", string(g.key.Mode)).Inc()
		}
		if err != nil {
			// The text went out; an unsettled hold expires and is voided, so the client is never
			// charged twice, at worst once too little.
			h.logger.Error("settling credit", zap.String("request_id", g.id), zap.String("account_id", g.acct.ID), zap.Error(err))
		} else {
			g.remaining = res.Available
			g.credit = 1
		}
		if gerr != nil {
			g.errKind = "client_gone"
			g.status = 499
			return
		}
		g.status = http.StatusOK
		if g.sse {
			s.event("done", doneEvent{CreditsUsed: 1, CreditsRemaining: g.remaining, RequestID: g.id, OutputTokens: g.stats.OutputTokens})
		}
	case gerr == nil:
		// The model finished without a single piece of text: nothing to charge for.
		g.void(bg, "empty output")
		g.fail(newError(http.StatusBadGateway, "backend_error", "", "the model returned no text; no credit was charged"))
	case s.started && !clientGone:
		// Text went out and the generation broke: return the credit and abort the response, so
		// no client can take a truncated text for a complete one.
		g.void(bg, "interrupted: "+kind.String())
		g.errKind = kind.String()
		h.logger.Warn("generation interrupted", zap.String("request_id", g.id), zap.Error(gerr))
		if g.sse {
			g.status = http.StatusOK
			s.event("error", errorBody{Error: g.backendError(gerr)})
			return
		}
		g.status = 0
		g.abort = true
	default:
		// No text, or the client left before any reached it: nothing to charge for.
		g.void(bg, kind.String())
		if clientGone {
			g.errKind = "client_gone"
			g.status = 499
			return
		}
		g.fail(g.backendError(gerr))
	}
}

func ctxDone(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// resolved notes that the request's hold was settled or voided (or tried to be: a failed
// resolution leaves a hold that expires on its own).
func (g *generation) resolved() {
	if g.holding {
		g.holding = false
		metrics.holdsOpen.Dec()
	}
}

func (g *generation) void(ctx context.Context, reason string) {
	t0 := time.Now()
	res, err := g.h.store().Void(ctx, g.acct.ID, g.id, reason)
	metrics.ledgerOps.WithLabelValues("void").Observe(time.Since(t0).Seconds())
	g.resolved()
	if err == nil {
		metrics.credits.WithLabelValues("voided", string(g.key.Mode)).Inc()
	}
	if err != nil {
		// The hold stays open and expires; the client is not charged either way.
		g.h.logger.Error("voiding hold", zap.String("request_id", g.id), zap.String("account_id", g.acct.ID), zap.Error(err))
		return
	}
	g.remaining = res.Available
}

func (g *generation) insufficient() *apiError {
	where := g.h.BuyURL
	if where == "" {
		where = "in the My Account area of this service"
	}
	msg := "no credits left; buy a credit package (10 credits = 2.00 EUR) " + where
	if g.key.Mode == ledger.Test {
		msg = "no test credits left; refill the test balance in the My Account area of this service"
	}
	return newError(http.StatusPaymentRequired, "insufficient_credits", "", msg)
}

// backendError maps a backend failure to CONTRACT section 3.
func (g *generation) backendError(err error) *apiError {
	var be *backends.Error
	retry := time.Duration(0)
	if errors.As(err, &be) {
		retry = be.RetryAfter
	}
	kind := backends.KindOf(err)
	g.errKind = kind.String()
	var e *apiError
	switch kind {
	case backends.KindUnavailable:
		e = newError(http.StatusServiceUnavailable, "backend_unavailable", "", "the model server is not reachable; no credit was charged; try again later")
		if retry == 0 {
			retry = 5 * time.Second
		}
	case backends.KindOverloaded:
		e = newError(http.StatusServiceUnavailable, "overloaded", "", "the model server is busy; no credit was charged; try again shortly")
		if retry == 0 {
			retry = 2 * time.Second
		}
	case backends.KindTimeout, backends.KindCanceled:
		e = newError(http.StatusGatewayTimeout, "backend_timeout", "", "the model did not start answering in time; no credit was charged")
	case backends.KindModelMissing:
		e = newError(http.StatusBadGateway, "backend_error", "", "the model of this tool is not installed on the model server; no credit was charged")
	case backends.KindUpstream, backends.KindInterrupted:
		e = newError(http.StatusBadGateway, "backend_error", "", "the model server answered with an error; no credit was charged")
	default:
		g.h.logger.Error("generation failed", zap.String("request_id", g.id), zap.Error(err))
		return errInternal
	}
	e.RetryAfter = retry
	return e
}

// fail answers with an error; nothing is charged.
func (g *generation) fail(e *apiError) {
	g.status = e.Status
	if g.errKind == "" {
		g.errKind = e.Code
	}
	writeError(g.w, g.id, e, g.remaining)
}

func (g *generation) internal(what string, err error) {
	g.h.logger.Error(what, zap.String("request_id", g.id), zap.Error(err))
	g.fail(errInternal)
}

// log writes the one structured line of a generate request. It never holds the key, the
// input or the output.
func (g *generation) log() {
	if g.logged {
		return
	}
	g.logged = true
	ce := g.h.logger.Check(zapcore.InfoLevel, "generate")
	if ce == nil {
		return
	}
	fields := []zap.Field{
		zap.String("request_id", g.id),
		zap.Int("status", g.status),
		zap.Int64("credits", g.credit),
		zap.Duration("duration", now().Sub(g.start)),
	}
	if g.acct.ID != "" {
		fields = append(fields, zap.String("account_id", g.acct.ID), zap.String("key_id", g.key.ID),
			zap.String("key", g.key.Prefix+"..."+g.key.Last4), zap.String("mode", string(g.key.Mode)))
	}
	if g.tool != nil {
		fields = append(fields, zap.String("tool", g.tool.Slug), zap.String("language", g.lang))
	}
	if g.stats.Pieces > 0 || g.stats.OutputTokens > 0 {
		fields = append(fields, zap.Duration("time_to_first", g.stats.TimeToFirst),
			zap.Int("output_tokens", g.stats.OutputTokens), zap.Int("prompt_tokens", g.stats.PromptTokens))
	}
	if g.queued > 0 {
		fields = append(fields, zap.Duration("queue_wait", g.queued))
	}
	if g.errKind != "" {
		fields = append(fields, zap.String("error", g.errKind))
	}
	ce.Write(fields...)
}

// observe counts the finished request in the metrics.
func (g *generation) observe() {
	tool := "none"
	if g.tool != nil {
		tool = g.tool.Slug
	}
	metrics.requests.WithLabelValues(tool, statusLabel(g.status)).Inc()
}

type doneEvent struct {
	CreditsUsed      int64  `json:"credits_used"`
	CreditsRemaining int64  `json:"credits_remaining"`
	RequestID        string `json:"request_id"`
	OutputTokens     int    `json:"output_tokens"`
}

// streamer writes the pieces of one generation to the client.
type streamer struct {
	g       *generation
	rc      *http.ResponseController
	started bool // the 200 headers were written
	// delivered: a piece reached the client's connection (a write and its flush succeeded);
	// only then may a client that leaves be charged.
	delivered bool
	writeErr  error
	buf       []byte
}

// emit sends one piece. The first piece sends the 200 headers.
func (s *streamer) emit(piece string) error {
	g := s.g
	if !s.started {
		hdr := g.w.Header()
		if g.sse {
			hdr.Set("Content-Type", "text/event-stream")
		} else {
			hdr.Set("Content-Type", "text/plain; charset=utf-8")
		}
		hdr.Set("X-Credits-Used", "1")
		hdr.Set("X-Credits-Remaining", strconv.FormatInt(g.remaining, 10))
		hdr.Set("X-Request-Id", g.id)
		hdr.Set("Cache-Control", "no-store")
		hdr.Set("X-Content-Type-Options", "nosniff")
		// Ask proxies (nginx) and Caddy's encode (RFC 10036 "Incremental") to pass each piece on
		// at once instead of buffering.
		hdr.Set("X-Accel-Buffering", "no")
		hdr.Set("Incremental", "?1")
		g.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	var err error
	if g.sse {
		s.buf = append(s.buf[:0], "event: delta\ndata: {\"text\":"...)
		s.buf = appendJSONString(s.buf, piece)
		s.buf = append(s.buf, "}\n\n"...)
		_, err = g.w.Write(s.buf)
	} else {
		s.buf = append(s.buf[:0], piece...)
		_, err = g.w.Write(s.buf)
	}
	if err == nil {
		err = s.rc.Flush()
	}
	if err != nil {
		s.writeErr = err
		return err
	}
	s.delivered = true
	return nil
}

// event writes one whole SSE event with a JSON payload.
func (s *streamer) event(name string, v any) {
	data, _ := jsonMarshal(v)
	s.buf = append(s.buf[:0], "event: "...)
	s.buf = append(s.buf, name...)
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, "\n\n"...)
	if _, err := s.g.w.Write(s.buf); err == nil {
		_ = s.rc.Flush()
	}
}
