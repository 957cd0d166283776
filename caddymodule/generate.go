package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/catalog"
	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/caddymodule/pipeline"
	"github.com/caddy-textgen/textgen/ledger"
)

// generate runs a valid, admitted request: its Idempotency-Key, then the generation itself.
func (g *generation) generate() {
	if g.ask.idem != "" && !g.beginIdempotent() {
		return
	}
	g.run()
	if g.ask.idem != "" {
		g.finishIdempotent()
	}
}

// run takes a place on a model host, holds a credit and streams the generation: the stages
// admission, hold, stream and outcome.
func (g *generation) run() {
	backend, adm, ok := g.admitModel()
	if !ok {
		return
	}
	if adm != nil {
		// Generate releases it; this covers the returns before, a refused hold among them
		// (the model host's place goes back).
		defer adm.Release()
	}
	if !g.holdCredit() {
		return
	}
	h := g.h
	// generation_timeout is the model's time: it starts once the credit is held. The waits for
	// the ledger before (the key, the hold; each bounded by the ledger's own timeout) are the
	// ledger's, so a slow ledger is answered as one (503 ledger_unavailable), never as a model
	// that did not answer in time.
	var kept *keptText
	if h.retain != nil {
		kept = h.retain.newKept(g)
	}
	s := newStreamer(g.w, g.r, g.door.encoder(g), g.ask.sse, g.id, g.remaining, time.Duration(h.WriteTimeout), time.Now().Add(time.Duration(h.GenerationTimeout)), kept)
	s.price = g.hold.Price
	defer s.close()
	// With retention on, the model call outlives the client once text was delivered (bounded by
	// generation_timeout): its context is not the request's, and clientLeft cancels it only
	// while nothing was delivered.
	base := g.r.Context()
	if s.kept != nil {
		base = context.WithoutCancel(base)
	}
	genCtx, cancel := context.WithDeadline(base, s.end)
	defer cancel()
	s.stop = cancel
	if s.kept != nil {
		stop := context.AfterFunc(g.r.Context(), func() { s.clientLeft(cancel) })
		defer stop()
	}
	genStart := time.Now()
	stopKeepAlive := s.startKeepAlive(time.Duration(h.SSEKeepAlive))
	// The stream waits for the model in here for as long as it runs, on the stack of Caddy's
	// connection goroutine, which Go keeps at the largest it ever grew: what this frame holds
	// beyond the call (the reservation, the prompt, the metrics) is done in functions of its
	// own (see backends' generateOn). Generate gives the model's place back when the model is
	// done; a slow client then reads the rest from what the streamer holds (drain).
	stats, gerr := backend.Generate(genCtx, g.backendRequest(adm, s), s.emit)
	if gerr == nil {
		gerr = g.contextCut(stats) // a prompt the server cut is not an answer to pay for
	}
	if err := s.drain(); err != nil && gerr == nil {
		gerr = &backends.Error{Kind: backends.KindCanceled, Pieces: stats.Pieces, Err: err} // the client did not get it all
	}
	if gerr == nil && s.texted && s.enc.whole() {
		// The whole answer goes out now; it is charged only if the client takes it.
		g.stats = stats
		if err := s.writeWhole(g.ending()); err != nil {
			gerr = &backends.Error{Kind: backends.KindCanceled, Pieces: stats.Pieces, Err: err}
		}
	}
	stopKeepAlive()
	g.ended(s, stats, gerr, genStart)
}

// admitModel is the admission stage: the backend that answers (a test key gets the catalog's
// sample text) and, for a live key, a place on a model host, asked before any credit is held so
// that a request the hosts cannot take is refused (or waits) without holding one. It answers
// the client when the request is refused (ok false).
//
//go:noinline
func (g *generation) admitModel() (backends.Backend, backends.Admission, bool) {
	if g.caller.key.Mode == ledger.Test {
		return backends.Sample{Pieces: catalog.SampleText(g.ask.tool.Slug, g.ask.lang)}, nil, true
	}
	if g.remaining < g.ask.tool.price {
		// Not enough credit: answer at once rather than after a wait in the admission queue.
		g.fail(g.insufficient())
		return nil, nil, false
	}
	tq := g.trace.now()
	var adm backends.Admission
	var err error
	if g.admission.hostPlace != (ratelimit.Slot{}) {
		held := g.admission.hostPlace
		g.admission.hostPlace = ratelimit.Slot{} // the backend owns it now
		adm, err = g.backend.AdmitHeld(g.r.Context(), g.admission.host, held.Release)
	} else {
		adm, err = g.backend.Admit(g.r.Context())
	}
	g.trace.step(spanQueueWait, tq, g)
	if err != nil {
		g.refuseAdmission(err)
		return nil, nil, false
	}
	if w := adm.Waited(); w > 0 {
		g.queued = w
		metrics.queueWait.Observe(w.Seconds())
	}
	return g.backend, adm, true
}

// holdCredit is the hold stage: the tool's price reserved (pipeline.Reserve), answering the client
// when it is refused (false). The reservation is made in memory, in commit order, without
// waiting for the disk (ledger.Reserve): a hold lost to a crash charges nothing, and the settle
// is durable only together with the hold before it. So the call to the model never waits for a
// disk sync, and a client without credit never makes the model work.
//
//go:noinline
func (g *generation) holdCredit() bool {
	t0 := time.Now()
	hold, err := pipeline.Reserve(context.WithoutCancel(g.r.Context()), g.store, ledger.HoldRequest{
		AccountID: g.caller.acct.ID, Mode: g.caller.key.Mode, RequestID: g.id, NewID: true, KeyID: g.caller.key.ID, Tool: g.ask.tool.Slug,
		Credits: g.ask.tool.price, TTL: time.Duration(g.h.HoldTTL),
	}, g.h.logger, holdMetrics{})
	g.trace.step(spanHold, t0, g)
	switch {
	case errors.Is(err, ledger.ErrInsufficientCredits):
		g.remaining = min(g.remaining, g.ask.tool.price-1) // less than the price, whatever the key's lookup said
		g.fail(g.insufficient())
		return false
	case errors.Is(err, ledger.ErrMemberCapReached):
		g.fail(memberCapReached(time.Now()))
		return false
	case errors.Is(err, ledger.ErrAccountDisabled):
		g.fail(errAccountDisabled)
		return false
	case errors.Is(err, ledger.ErrKeyBudgetExhausted):
		g.fail(keyBudgetExhausted(err))
		return false
	case errors.Is(err, ledger.ErrUnavailable):
		g.ledgerUnavailable(err)
		return false
	case err != nil:
		g.internal("holding credit", err)
		return false
	}
	g.hold = hold
	g.remaining = hold.Available
	if g.caller.key.Mode == ledger.Live {
		// An automatic top-up due after this hold starts in the background (My Account's).
		textgenapp.HeldLive(g.store, g.caller.acct.ID, hold.Available)
	}
	return true
}

// backendRequest is what the model is asked: the tool's prompt in the request's language and
// tone, the input, the tool's settings, with adm's place and s's flush.
//
//go:noinline
func (g *generation) backendRequest(adm backends.Admission, s *streamer) backends.Request {
	h := g.h
	if h.LogPrompts {
		h.logger.Debug("prompt", zap.String("request_id", g.id), zap.String("system", g.prompt.system), zap.String("input", g.ask.req.Input))
	}
	temperature, maxTokens := g.ask.tool.temperature, g.maxOutputTokens()
	var format *backends.Format
	if c := g.ask.chat; c != nil {
		if c.temperature != nil {
			temperature = c.temperature
		}
		format = c.format
	}
	return backends.Request{
		Model:             g.ask.tool.model,
		System:            g.prompt.system,
		Prompt:            g.ask.req.Input,
		Temperature:       temperature,
		MaxTokens:         maxTokens,
		Format:            format,
		NumCtx:            g.prompt.fit.numCtx,
		Seed:              h.Seed,
		FirstPieceTimeout: time.Duration(h.FirstPieceTimeout),
		IdleTimeout:       time.Duration(h.IdleTimeout),
		Admission:         adm,
		Flush:             s.flush,
	}
}

// ended records the generation's figures, settles or voids its hold (finish) and ends the
// keeping of its text.
//
//go:noinline
func (g *generation) ended(s *streamer, stats backends.Stats, gerr error, genStart time.Time) {
	g.stats = stats
	if s.texted {
		metrics.timeToFirst.Observe(stats.TimeToFirst.Seconds())
		metrics.generation.Observe(time.Since(genStart).Seconds())
		g.trace.stepAt(spanFirstPiece, genStart, genStart.Add(stats.TimeToFirst), g)
	}
	g.trace.step(spanStream, genStart, g)
	if stats.OutputTokens > 0 {
		metrics.outputTokens.WithLabelValues(g.ask.tool.Slug).Add(float64(stats.OutputTokens))
	}
	ts := g.trace.now()
	g.finish(s, gerr)
	g.trace.step(spanSettle, ts, g)
	if s.kept != nil {
		g.keep(s.kept, gerr)
	}
}

// keep ends the keeping of the generation's text as the charge decides (pipeline.KeepText).
func (g *generation) keep(k *keptText, gerr error) {
	k.mu.Lock()
	overflow := k.overflow
	k.mu.Unlock()
	discard, state, reason := pipeline.KeepText(g.credit > 0, overflow, gerr, g.stats.DoneReason)
	if discard {
		k.discard()
		return
	}
	// The response has ended already for a client that stayed; the handler waits for the last
	// write only for an Idempotency-Key, whose record must not be finished before the text is.
	k.end(state, g.stats.OutputTokens, reason, g.ask.idem != "")
}

// refuseAdmission answers a request the model hosts could not take: 503 overloaded (queue full
// or wait too long) or backend_unavailable; nothing was reserved.
func (g *generation) refuseAdmission(err error) {
	if backends.KindOf(err) == backends.KindCanceled {
		g.left() // while queued
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
		e.kind = reason
	} else {
		metrics.backendErrors.WithLabelValues(e.kind).Inc()
	}
	g.fail(e)
}

// finish applies the charging rules to what the stream found (pipeline.Decide; docs/API.md,
// "Charging"): it settles or voids the hold, then ends the response. It is the one place where
// a generation that ran sets its status and its credit.
func (g *generation) finish(s *streamer, gerr error) {
	d := pipeline.Decide(s.result(gerr))
	if d.ModelFailed {
		metrics.backendErrors.WithLabelValues(d.Kind.String()).Inc()
	}
	g.charge(d)
	switch d.End {
	case pipeline.EndComplete:
		g.status = http.StatusOK
		if !s.enc.whole() { // a whole answer went out before the charge (run)
			x := g.ending()
			s.last(func(dst []byte, id int) []byte { return s.enc.end(dst, id, x) })
		}
	case pipeline.EndClientGone:
		g.left()
	case pipeline.EndEmpty:
		g.failStream(s, newError(http.StatusBadGateway, "backend_error", "", "the model returned no text; no credit was charged"))
	case pipeline.EndBroken:
		// Text went out and the generation broke: no client may take the truncated text for a
		// complete one.
		g.errKind = d.Kind.String()
		g.h.logger.Warn("generation interrupted", zap.String("request_id", g.id), zap.Error(gerr))
		if !s.started { // a whole answer: nothing went out
			g.failStream(s, g.backendError(gerr))
			return
		}
		if g.ask.sse {
			g.status = http.StatusOK
			g.errorEvent(s, g.backendError(gerr))
			return
		}
		g.status = 0
		g.abort = true
	case pipeline.EndFailed:
		g.failStream(s, g.backendError(gerr))
	}
}

// maxOutputTokens is the most tokens g's answer may have: the tool's, or less where a chat
// completion asks for less (max_tokens, max_completion_tokens).
func (g *generation) maxOutputTokens() int {
	n := g.ask.tool.maxOutputTokens
	if c := g.ask.chat; c != nil && c.maxTokens > 0 && (n <= 0 || c.maxTokens < n) {
		n = c.maxTokens
	}
	return n
}

// ending is what the end of g's complete answer says: the hold's price used, the tokens, why it
// ended.
func (g *generation) ending() ending {
	return ending{requestID: g.id, creditsUsed: g.hold.Price, remaining: g.remaining, promptTokens: g.stats.PromptTokens,
		outputTokens: g.stats.OutputTokens, finishReason: pipeline.FinishReason(g.stats.DoneReason)}
}

// charge settles (d.Charge) or voids the request's hold; the charge stands once the ledger took
// the settle, now or later (pipeline.Hold). The client is told the credits the ledger reports.
func (g *generation) charge(d pipeline.Decision) {
	bg := context.WithoutCancel(g.r.Context())
	if d.Charge {
		if g.hold.Settle(bg) {
			g.credit = g.hold.Price
		}
	} else {
		g.hold.Void(bg, d.VoidReason)
	}
	g.remaining = g.hold.Available
}

// failStream answers a generation that ends without text with e: as its JSON error, or, when
// SSE keep-alives have already sent the 200 headers, as an SSE error event (the stream then
// ends without a done event; nothing was charged).
func (g *generation) failStream(s *streamer, e *apiError) {
	if !s.started {
		g.fail(e)
		return
	}
	g.status, g.errKind = http.StatusOK, e.logKind()
	g.errorEvent(s, e)
}

// errorEvent ends an SSE stream with e as its error event, with the request's id as every
// error answer has it (e may be one of the shared values: the id goes into a copy).
func (g *generation) errorEvent(s *streamer, e *apiError) {
	c := *e
	c.RequestID = g.id
	s.last(func(dst []byte, id int) []byte { return s.enc.fail(dst, id, &c) })
}

func ctxDone(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// ledgerUnavailable answers 503 ledger_unavailable: the ledger takes no new work now (its disk
// is nearly full, its database unreachable); nothing was reserved or charged.
func (g *generation) ledgerUnavailable(err error) {
	metrics.rejections.WithLabelValues("ledger_unavailable").Inc()
	if ce := g.h.logger.Check(zapcore.DebugLevel, "ledger unavailable"); ce != nil {
		ce.Write(zap.String("request_id", g.id), zap.Error(err))
	}
	g.fail(errLedgerUnavailable)
}

func (g *generation) insufficient() *apiError {
	// Where to buy: buy_url, else My Account of this ledger, with the packages it sells (none
	// when its buying is off: then it is where the account is kept, and test credits refilled).
	where, packages, buying := g.h.BuyURL, []string(nil), g.h.BuyURL != ""
	if where == "" {
		area := g.h.app.AccountArea(g.h.ledgerRef.Key())
		where, packages, buying = area.Where, area.Packages, len(area.Packages) > 0
	}
	price := g.ask.tool.price
	msg := "no credits left; "
	if price > 1 && g.remaining > 0 {
		msg = fmt.Sprintf("%s costs %d credits and %d are available; ", g.ask.tool.Slug, price, g.remaining)
	}
	if debt := g.debt(); debt > 0 {
		msg = fmt.Sprintf("this account owes %d credits (a refund or dispute took back credits that were already spent) and can generate again once a purchase pays the debt; ", debt)
	}
	switch {
	case g.caller.key.Mode == ledger.Test && where != "":
		msg = testShort(g.ask.tool.Slug, price, g.remaining) + "refill the test balance at " + where
	case g.caller.key.Mode == ledger.Test:
		msg = testShort(g.ask.tool.Slug, price, g.remaining) + "ask the operator of this service to refill them"
	case buying && len(packages) > 0:
		msg += "buy a credit package (" + strings.Join(packages, ", ") + ") at " + where
	case buying:
		msg += "buy credits at " + where
	default:
		// Nowhere to buy: name the account, so that its operator knows whom to credit, and the
		// command that does it (on a site of one's own, the reader is that operator).
		msg += fmt.Sprintf("this service does not sell credits online: ask the operator of this service to add credits to account %s "+
			"(the operator's command: caddy textgen credits grant --account %s --credits <n>)", g.caller.acct.ID, g.caller.acct.ID)
	}
	e := newError(http.StatusPaymentRequired, "insufficient_credits", "", msg)
	e.CreditsRequired = price
	return e
}

// testShort begins the 402 of a test key: no test credits left, or fewer than the tool's price.
func testShort(tool string, price, available int64) string {
	if price > 1 && available > 0 {
		return fmt.Sprintf("%s costs %d test credits and %d are available; ", tool, price, available)
	}
	return "no test credits left; "
}

// debt is how many live credits the account owes (0: none): a negative balance, which only a
// refund or dispute of a purchase can leave (ledger.Reversals). Read only for a 402.
func (g *generation) debt() int64 {
	if g.caller.key.Mode != ledger.Live {
		return 0
	}
	b, err := g.store.Balance(g.r.Context(), g.caller.acct.ID)
	if err != nil || b.Balance >= 0 {
		return 0
	}
	return -b.Balance
}

// backendError maps a backend failure to its error answer (docs/API.md, "Errors").
func (g *generation) backendError(err error) *apiError {
	var be *backends.Error
	retry := time.Duration(0)
	if errors.As(err, &be) {
		retry = be.RetryAfter
	}
	kind := backends.KindOf(err)
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
	case backends.KindTooLong:
		if be != nil && be.Pieces > 0 {
			e = newError(http.StatusRequestEntityTooLarge, "input_too_large", "input", "the model server cut the prompt to fit its context, so the text is not an answer to the whole input; shorten the input; no credit was charged")
		} else {
			metrics.contextRefusals.WithLabelValues(g.ask.tool.Slug, "server").Inc()
			e = newError(http.StatusRequestEntityTooLarge, "input_too_large", "input", "the model server refused the input: with the tool's instructions and answer it does not fit the model's context; shorten the input; no credit was charged")
		}
	case backends.KindUpstream, backends.KindInterrupted:
		e = newError(http.StatusBadGateway, "backend_error", "", "the model server answered with an error; no credit was charged")
	default:
		g.h.logger.Error("generation failed", zap.String("request_id", g.id), zap.Error(err))
		return errInternal.as(kind.String())
	}
	e.RetryAfter = retry
	e.kind = kind.String()
	return e
}
