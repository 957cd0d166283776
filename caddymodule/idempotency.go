package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/pipeline"
	"github.com/caddy-textgen/textgen/ledger"
)

// beginIdempotent claims the request's Idempotency-Key (pipeline.Claim). It answers the request
// itself and returns false when the key was used before: with the first result when that
// request was charged, 409 while it is still running, 422 when the key came with another body.
func (g *generation) beginIdempotent() bool {
	if len(g.ask.idem) > pipeline.MaxIdempotencyKey {
		g.fail(newError(http.StatusBadRequest, "invalid_field", "Idempotency-Key", "the Idempotency-Key header is longer than 255 characters"))
		return false
	}
	claim, prior, err := pipeline.Claim(g.r.Context(), g.store, ledger.IdempotencyRecord{
		AccountID: g.caller.acct.ID, Key: g.idemRecordKey(), RequestID: g.id, Fingerprint: g.ask.fingerprint, Created: now(),
		HoldTTL: time.Duration(g.h.HoldTTL),
	})
	switch {
	case errors.Is(err, ledger.ErrUnavailable):
		g.ledgerUnavailable(err)
		return false
	case err != nil:
		g.internal("idempotency record", err)
		return false
	case claim == pipeline.Claimed:
		return true
	case claim == pipeline.ClaimReused:
		g.fail(newError(http.StatusUnprocessableEntity, "idempotency_key_reused", "Idempotency-Key",
			"this Idempotency-Key was used with a different request body; use a new key for a new request"))
	case pipeline.Replayable(prior) && g.replayKept(prior):
		// The first request's text is kept (retention): sent again, as it runs or as it ended.
	case claim == pipeline.ClaimRunning:
		e := newError(http.StatusConflict, "idempotency_in_progress", "Idempotency-Key",
			"a request with this Idempotency-Key is still running; retry after it has finished")
		e.RetryAfter = time.Second
		g.fail(e)
	default:
		g.replay(prior)
	}
	return false
}

// idemRecordKey is the key the ledger keeps the record under: the client's Idempotency-Key in
// the key's mode, so that a live request never replays a test request's result (or the other
// way round) for the same key.
func (g *generation) idemRecordKey() string { return string(g.caller.key.Mode) + ":" + g.ask.idem }

// replay answers a retried request whose first attempt was charged, without its text (not kept)
// and without a new charge, in the door's shape.
func (g *generation) replay(rec ledger.IdempotencyRecord) {
	g.status = rec.Status
	g.errKind = "idempotent_replay"
	g.door.replay(g, rec)
}

// replayStatus is generate's replay without text: the first status and a JSON body naming the
// first request.
func replayStatus(g *generation, rec ledger.IdempotencyRecord) {
	body, _ := json.Marshal(map[string]any{
		"idempotent_replay": true,
		"request_id":        rec.RequestID,
		"status":            rec.Status,
		"message":           "a request with this Idempotency-Key was already completed and charged (request_id); it was not generated or charged again",
	})
	g.writeReplay(rec.Status, "application/json", append(body, '\n'))
}

// writeReplay answers a replay with status and body: nothing charged, Idempotent-Replayed.
func (g *generation) writeReplay(status int, contentType string, body []byte) {
	hdr := g.w.Header()
	hdr.Set("Content-Type", contentType)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Request-Id", g.id)
	hdr.Set("Idempotent-Replayed", "true")
	hdr.Set("X-Credits-Used", "0")
	hdr.Set("X-Credits-Remaining", strconv.FormatInt(g.remaining, 10))
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	g.w.WriteHeader(status)
	_, _ = g.w.Write(body)
}

// replayKept answers a retry with the kept text of the first request, if there is one: the
// first request's generation was charged (or runs and has delivered text), and its retention
// window has not ended. It streams while that generation still runs, plain or as SSE as the
// retry asks, with Idempotent-Replayed: true and no charge; the first request's outcome is in
// X-Generation-State (running, completed, interrupted) and X-Generation-Id.
func (g *generation) replayKept(rec ledger.IdempotencyRecord) bool {
	if g.h.retain == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(g.r.Context(), time.Duration(g.h.GenerationTimeout)+time.Duration(g.h.WriteTimeout))
	defer cancel()
	src, view, err := g.h.retain.find(ctx, g.store, g.caller.acct.ID, g.caller.key.Mode, rec.RequestID)
	if err != nil || view.voided {
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			g.h.logger.Error("reading a kept generation for a replay", zap.String("request_id", g.id), zap.Error(err))
		}
		return false
	}
	return g.door.replayKept(g, ctx, src, view, rec)
}

// replayKeptStream is generate's replay of kept text: streamed while the first generation runs,
// plain or as SSE as the retry asks.
func replayKeptStream(g *generation, ctx context.Context, src keptSource, view keptView, rec ledger.IdempotencyRecord) bool {
	g.status = http.StatusOK
	g.errKind = "idempotent_replay"
	out := &keptWriter{h: g.h, w: g.w, r: g.r, ctx: ctx, reqID: g.id, remaining: g.remaining, src: src, view: view, replayOf: rec.RequestID}
	// A replay is the whole text: a Range or Last-Event-ID belongs to GET /api/v1/generations.
	g.r.Header.Del("Range")
	g.r.Header.Del("Last-Event-ID")
	if g.ask.sse {
		g.abort = out.sse()
	} else {
		g.abort = out.plain()
	}
	return true
}

// finishIdempotent records the outcome: the status when the request was charged, else a
// release, so a retry of a failed request may run (pipeline.FinishIdempotent).
func (g *generation) finishIdempotent() {
	pipeline.FinishIdempotent(context.WithoutCancel(g.r.Context()), g.store, g.h.logger, g.id, g.caller.acct.ID, g.idemRecordKey(), g.credit > 0)
}
