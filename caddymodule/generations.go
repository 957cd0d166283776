package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// GET /api/v1/generations/{request_id}: the receipt of a kept generation and its text, plain or
// as server-sent events, resumable with Range (plain) or Last-Event-ID (SSE), for the account
// that paid for it, without a charge. Idempotency-Key replays stream the text the same way
// (idempotency.go).

const generationsPath = "/api/v1/generations/"

// receipt is the JSON answer of GET /api/v1/generations/{request_id}.
type receipt struct {
	RequestID string `json:"request_id"`
	Tool      string `json:"tool"`
	Language  string `json:"language"`
	Mode      string `json:"mode"`
	// Status is the charge: "settled" (charged), "open" (not yet settled) or "voided".
	Status  string `json:"status"`
	Credits int64  `json:"credits"`
	// State is the generation's: "running", "completed" or "interrupted".
	State        string     `json:"state"`
	Completed    bool       `json:"completed"`
	Created      time.Time  `json:"created"`
	Finished     *time.Time `json:"finished,omitempty"`
	Expires      time.Time  `json:"expires"`
	OutputTokens int        `json:"output_tokens"`
	// FinishReason: why a completed generation's answer ended ("stop", "length"); absent
	// otherwise.
	FinishReason string `json:"finish_reason,omitempty"`
	Bytes        int64  `json:"bytes"`
	Text         string `json:"text"`
}

var (
	errGenerationNotFound = &apiError{Status: http.StatusNotFound, Code: "not_found",
		Message: "no kept generation has this request id for this API key's account; generations are kept for the retention window after they end, and only when they were charged"}
	errRangeNotSatisfiable = &apiError{Status: http.StatusRequestedRangeNotSatisfiable, Code: "range_not_satisfiable", Param: "Range",
		Message: `the Range header must be "bytes=N-" with N below the length of the text`}
	errLastEventIDBeyond = &apiError{Status: http.StatusRequestedRangeNotSatisfiable, Code: "range_not_satisfiable", Param: "Last-Event-ID",
		Message: "Last-Event-ID is past the last event of this generation"}
	errLastEventIDInvalid = &apiError{Status: http.StatusBadRequest, Code: "invalid_field", Param: "Last-Event-ID",
		Message: "Last-Event-ID must be the id of an event of this generation (a whole number)"}
)

// isRequestID reports whether id has the form of newRequestID's ids.
func isRequestID(id string) bool {
	if len(id) != 26 || !strings.HasPrefix(id, "req_") {
		return false
	}
	for i := 4; i < len(id); i++ {
		if strings.IndexByte(base62, id[i]) < 0 {
			return false
		}
	}
	return true
}

// serveGeneration answers GET /api/v1/generations/{request_id}.
func (h *Handler) serveGeneration(w http.ResponseWriter, r *http.Request, reqID string, store handlerLedger) (abort bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, reqID, errMethodNotAllowedGET, -1)
		return false
	}
	kc, e := h.checkKey(store, w, r, reqID, true)
	if e != nil {
		writeError(w, reqID, e, kc.available)
		return false
	}
	rid := strings.TrimPrefix(r.URL.Path, generationsPath)
	if id, ok := strings.CutSuffix(rid, signedReceiptSuffix); ok {
		h.serveSignedReceipt(w, r, reqID, store, kc, id) // receipts.go
		return false
	}
	if h.retain == nil || !isRequestID(rid) {
		writeError(w, reqID, errGenerationNotFound, kc.available)
		return false
	}
	// A follower is bounded as the generation is, plus the time to send what is left.
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(h.GenerationTimeout)+time.Duration(h.WriteTimeout))
	defer cancel()
	src, view, err := h.retain.find(ctx, store, kc.acct.ID, kc.key.Mode, rid)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		writeError(w, reqID, errGenerationNotFound, kc.available)
		return false
	case errors.Is(err, ledger.ErrUnavailable):
		writeError(w, reqID, errLedgerUnavailable, kc.available)
		return false
	case err != nil:
		h.logger.Error("reading a kept generation", zap.String("request_id", reqID), zap.String("generation", rid), zap.Error(err))
		writeError(w, reqID, errInternal, kc.available)
		return false
	}
	if view.voided {
		writeError(w, reqID, errGenerationNotFound, kc.available)
		return false
	}
	out := &keptWriter{h: h, w: w, r: r, ctx: ctx, reqID: reqID, remaining: kc.available, src: src, view: view}
	switch {
	case r.Method == http.MethodHead:
		h.writeReceipt(out, store, kc.acct.ID)
	case wantsSSE(r):
		return out.sse()
	case wantsPlain(r):
		return out.plain()
	default:
		h.writeReceipt(out, store, kc.acct.ID)
	}
	return false
}

// wantsPlain reports whether the client asked for the text itself (Accept: text/plain).
func wantsPlain(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/plain") {
				return true
			}
		}
	}
	return false
}

// writeReceipt answers with the receipt: the charge from the ledger's hold, the generation's
// figures and the text so far.
func (h *Handler) writeReceipt(out *keptWriter, store handlerLedger, acct string) {
	v := out.view
	rc := receipt{RequestID: v.rec.RequestID, Tool: v.rec.Tool, Language: v.rec.Language, Mode: string(v.rec.Mode),
		State: string(v.rec.State), Completed: v.rec.State == ledger.GenerationCompleted, Created: v.rec.Created,
		Expires: v.rec.Expires, OutputTokens: v.rec.OutputTokens, FinishReason: v.rec.FinishReason, Bytes: v.bytes, Text: strings.Join(v.pieces, "")}
	if !v.rec.Finished.IsZero() {
		f := v.rec.Finished
		rc.Finished = &f
	}
	hold, err := store.GetHold(out.ctx, acct, v.rec.RequestID)
	switch {
	case err == nil:
		rc.Status = string(hold.State)
		if hold.State == ledger.HoldSettled {
			rc.Credits = 1
		}
	case errors.Is(err, ledger.ErrNotFound):
		rc.Status = "unknown"
	default:
		h.logger.Error("reading the hold of a kept generation", zap.String("request_id", out.reqID), zap.Error(err))
		writeError(out.w, out.reqID, errInternal, out.remaining)
		return
	}
	hdr := out.w.Header()
	hdr.Set("X-Credits-Used", "0")
	hdr.Set("X-Credits-Remaining", strconv.FormatInt(out.remaining, 10))
	hdr.Set("X-Generation-State", rc.State)
	writeJSON(out.w, out.r, out.reqID, http.StatusOK, rc)
}

// keptWriter streams a kept generation to one client.
type keptWriter struct {
	h         *Handler
	w         http.ResponseWriter
	r         *http.Request
	ctx       context.Context
	reqID     string
	remaining int64
	src       keptSource
	view      keptView
	// replayOf is the request id of the first request when this is an Idempotency-Key replay.
	replayOf string
}

// headers sets what every text answer carries.
func (o *keptWriter) headers(contentType string) {
	hdr := o.w.Header()
	hdr.Set("Content-Type", contentType)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Accel-Buffering", "no")
	hdr.Set("X-Request-Id", o.reqID)
	hdr.Set("X-Credits-Used", "0")
	if o.remaining >= 0 {
		hdr.Set("X-Credits-Remaining", strconv.FormatInt(o.remaining, 10))
	}
	hdr.Set("X-Generation-Id", o.view.rec.RequestID)
	hdr.Set("X-Generation-State", string(o.view.rec.State))
	if o.replayOf != "" {
		hdr.Set("Idempotent-Replayed", "true")
	}
}

// wait returns a view with more than have pieces, or the end.
func (o *keptWriter) wait(have int) bool {
	v, err := o.src.next(o.ctx, have)
	if err != nil {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			o.h.logger.Error("following a kept generation", zap.String("request_id", o.reqID), zap.Error(err))
		}
		return false
	}
	o.view = v
	return true
}

func (o *keptWriter) send(rc *http.ResponseController, b []byte) bool {
	if wt := time.Duration(o.h.WriteTimeout); wt > 0 {
		_ = rc.SetWriteDeadline(time.Now().Add(wt))
	}
	if _, err := o.w.Write(b); err != nil {
		return false
	}
	ok := rc.Flush() == nil
	// Cleared between writes: on HTTP/2 an armed deadline resets the stream when it fires, also
	// while a follower waits for the next piece.
	_ = rc.SetWriteDeadline(time.Time{})
	return ok
}

// plain streams the text from the Range's first byte (206) or from the start (200), as it
// comes while the generation runs. It reports whether the response must be aborted: the
// generation ended before its text did (interrupted or voided while followed), so that no client
// takes a cut text for a whole one.
func (o *keptWriter) plain() (abort bool) {
	from, ranged, ok := parseRange(o.r.Header.Get("Range"))
	if !ok {
		o.rangeError(errRangeNotSatisfiable)
		return false
	}
	for o.view.bytes <= from && !o.view.ended() { // a client cannot be ahead; but the text may be
		if !o.wait(len(o.view.pieces)) {
			return false
		}
	}
	if ranged && from >= o.view.bytes {
		o.rangeError(errRangeNotSatisfiable)
		return false
	}
	o.headers("text/plain; charset=utf-8")
	status := http.StatusOK
	if ranged {
		status = http.StatusPartialContent
		if o.view.ended() {
			o.w.Header().Set("Content-Range", "bytes "+strconv.FormatInt(from, 10)+"-"+strconv.FormatInt(o.view.bytes-1, 10)+"/"+strconv.FormatInt(o.view.bytes, 10))
		} else {
			// The end is not known while the generation runs.
			o.w.Header().Set("Content-Range", "bytes "+strconv.FormatInt(from, 10)+"-*/*")
		}
	}
	if o.view.ended() {
		o.w.Header().Set("Content-Length", strconv.FormatInt(o.view.bytes-from, 10))
	}
	startedEnded := o.view.ended()
	o.w.WriteHeader(status)
	rc := http.NewResponseController(o.w)
	pos, sent := int64(0), 0
	var buf []byte
	for {
		buf = buf[:0]
		for _, p := range o.view.pieces[sent:] {
			end := pos + int64(len(p))
			if end > from {
				buf = append(buf, p[max(0, from-pos):]...)
			}
			pos = end
		}
		sent = len(o.view.pieces)
		if len(buf) > 0 && !o.send(rc, buf) {
			return false
		}
		if o.view.ended() {
			return !startedEnded && (o.view.voided || o.view.rec.State != ledger.GenerationCompleted)
		}
		if !o.wait(sent) {
			return true
		}
	}
}

// sse streams the pieces after Last-Event-ID as delta events (id = the piece's number from 1),
// then done (id = pieces+1), or error if the generation was interrupted.
func (o *keptWriter) sse() (abort bool) {
	after := 0
	if v := o.r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			writeError(o.w, o.reqID, errLastEventIDInvalid, o.remaining)
			return false
		}
		after = n
	}
	for len(o.view.pieces) < after && !o.view.ended() {
		if !o.wait(len(o.view.pieces)) {
			return false
		}
	}
	if after > len(o.view.pieces)+1 {
		writeError(o.w, o.reqID, errLastEventIDBeyond, o.remaining)
		return false
	}
	o.headers("text/event-stream")
	o.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(o.w)
	sent := after
	var buf []byte
	for {
		buf = buf[:0]
		for i := sent; i < len(o.view.pieces); i++ {
			buf = appendDelta(buf, i+1, o.view.pieces[i])
		}
		sent = max(sent, len(o.view.pieces))
		if len(buf) > 0 && !o.send(rc, buf) {
			return false
		}
		if o.view.ended() {
			break
		}
		if !o.wait(sent) {
			return true
		}
	}
	if after == len(o.view.pieces)+1 {
		return false // the client has every event
	}
	buf = appendEventID(buf[:0], len(o.view.pieces)+1)
	var data []byte
	if o.view.rec.State == ledger.GenerationCompleted && !o.view.voided {
		data, _ = jsonMarshal(keptDoneEvent{CreditsUsed: 0, CreditsRemaining: o.remaining, RequestID: o.view.rec.RequestID,
			OutputTokens: o.view.rec.OutputTokens, Replayed: true, Completed: true})
		buf = append(buf, "event: done\ndata: "...)
	} else {
		e := *errGenerationInterrupted
		e.RequestID = o.view.rec.RequestID
		data, _ = jsonMarshal(errorBody{Error: &e})
		buf = append(buf, "event: error\ndata: "...)
	}
	buf = append(append(buf, data...), "\n\n"...)
	o.send(rc, buf)
	return false
}

// keptDoneEvent ends a resumed or replayed SSE stream: nothing was charged for it.
type keptDoneEvent struct {
	CreditsUsed      int64  `json:"credits_used"`
	CreditsRemaining int64  `json:"credits_remaining"`
	RequestID        string `json:"request_id"`
	OutputTokens     int    `json:"output_tokens"`
	Replayed         bool   `json:"replayed"`
	Completed        bool   `json:"completed"`
}

var errGenerationInterrupted = &apiError{Status: http.StatusBadGateway, Code: "generation_interrupted",
	Message: "the model stopped before the end of this generation; the text above is all it produced"}

func (o *keptWriter) rangeError(e *apiError) {
	if o.view.ended() {
		o.w.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(o.view.bytes, 10))
	}
	writeError(o.w, o.reqID, e, o.remaining)
}

// parseRange reads "bytes=N-"; no header is the whole text. ok is false for anything else.
func parseRange(v string) (from int64, ranged, ok bool) {
	if v == "" {
		return 0, false, true
	}
	unit, spec, found := strings.Cut(strings.TrimSpace(v), "=")
	if !found || !strings.EqualFold(strings.TrimSpace(unit), "bytes") {
		return 0, true, false
	}
	first, rest, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found || strings.TrimSpace(rest) != "" {
		return 0, true, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(first), 10, 64)
	if err != nil || n < 0 {
		return 0, true, false
	}
	return n, true, true
}
