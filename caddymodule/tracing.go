package caddymodule

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// The spans of a generate request, for Caddy's `tracing` directive: Caddy's tracing handler
// puts its server span in the request's context, and the steps of a generate request become
// its children under one textgen.generate span (key check, limits, queue wait, hold, the model's
// first piece, the stream, settle). They carry the tool, the status and the outcome, never the
// key, the account or the text. Without the directive (the span in the context does not
// record) nothing is made: each step is a nil check.
const tracerName = "github.com/caddy-textgen/textgen"

// The span names, one per step of a generate request (docs/OPERATING.md lists them).
const (
	spanGenerate   = "textgen.generate"
	spanKeyCheck   = "textgen.key_check"
	spanLimits     = "textgen.limits"
	spanQueueWait  = "textgen.queue_wait"
	spanHold       = "textgen.hold"
	spanFirstPiece = "textgen.model_first_piece"
	spanStream     = "textgen.stream"
	spanSettle     = "textgen.settle"
)

// reqTrace is the tracing of one generate request; its zero value (tracing off) does nothing.
type reqTrace struct {
	tracer oteltrace.Tracer
	ctx    context.Context // the request's, with the textgen.generate span
	span   oteltrace.Span  // textgen.generate
}

// startTrace opens the request's textgen.generate span under the span Caddy's tracing handler
// put in r's context; with none recording, it returns the zero reqTrace.
func startTrace(r *http.Request) reqTrace {
	parent := oteltrace.SpanFromContext(r.Context())
	if !parent.IsRecording() {
		return reqTrace{}
	}
	tracer := parent.TracerProvider().Tracer(tracerName)
	ctx, span := tracer.Start(r.Context(), spanGenerate, oteltrace.WithSpanKind(oteltrace.SpanKindInternal))
	return reqTrace{tracer: tracer, ctx: ctx, span: span}
}

// on reports whether the request is traced.
func (t *reqTrace) on() bool { return t.tracer != nil }

// now is the time a step starts, read only when the request is traced.
func (t *reqTrace) now() time.Time {
	if t.tracer == nil {
		return time.Time{}
	}
	return time.Now()
}

// step records one step of the request that started at start and is over now.
func (t *reqTrace) step(name string, start time.Time, g *generation) {
	if t.tracer == nil {
		return
	}
	t.stepAt(name, start, time.Now(), g)
}

// stepAt records one finished step of the request as a child span from start to end, with the
// tool once it is known. Steps are recorded when they are over, with their own timestamps, so
// that the steps' code needs no span of its own.
func (t *reqTrace) stepAt(name string, start, end time.Time, g *generation) {
	if t.tracer == nil {
		return
	}
	_, s := t.tracer.Start(t.ctx, name, oteltrace.WithTimestamp(start))
	if g.ask.tool != nil {
		s.SetAttributes(attribute.String("textgen.tool", g.ask.tool.Slug))
	}
	if name == spanSettle {
		s.SetAttributes(attribute.Int64("textgen.credits_charged", g.credit))
	}
	s.End(oteltrace.WithTimestamp(end))
}

// finish ends the textgen.generate span with the request's outcome: its tool, status, error code
// and the credits charged.
func (t *reqTrace) finish(g *generation) {
	if t.tracer == nil {
		return
	}
	tool := "none"
	if g.ask.tool != nil {
		tool = g.ask.tool.Slug
	}
	t.span.SetAttributes(
		attribute.String("textgen.tool", tool),
		attribute.String("textgen.status", statusLabel(g.status)),
		attribute.Int64("textgen.credits_charged", g.credit),
		attribute.String("textgen.request_id", g.id),
	)
	if g.errKind != "" {
		t.span.SetAttributes(attribute.String("textgen.error", g.errKind))
	}
	if g.status == 0 || g.status >= 500 {
		t.span.SetStatus(codes.Error, "status "+strconv.Itoa(g.status))
	}
	t.span.End()
}
