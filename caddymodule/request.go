package caddymodule

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/caddy-textgen/textgen/caddymodule/catalog"
)

// readRequest reads and checks the body: its content type, the body itself within
// body_read_timeout and max_body_bytes, the JSON, and the values of its fields. It returns what
// is wrong with it, and fills in a with what it found (so far); the caller answers that after the request has
// been counted against its limits (handler.go).
func (h *Handler) readRequest(w http.ResponseWriter, r *http.Request, a *ask) (e *apiError) {
	a.sse = wantsSSE(r)
	buf, e := h.readJSONBody(w, r)
	if e != nil {
		return e
	}
	defer bodyPool.Put(buf)
	body := buf.Bytes()
	if a.req, e = parseGenRequest(body); e == nil {
		a.tool, a.lang, e = h.validate(&a.req)
	}
	if e != nil {
		return e // with what was found so far: the log names a known tool
	}
	if a.idem = r.Header.Get("Idempotency-Key"); a.idem != "" {
		sum := sha256.Sum256(body)
		a.fingerprint = hex.EncodeToString(sum[:])
	}
	return nil
}

// readJSONBody checks the content type and reads the body (readBody) into a pooled buffer, which
// the caller returns with bodyPool.Put.
func (h *Handler) readJSONBody(w http.ResponseWriter, r *http.Request) (*bytes.Buffer, *apiError) {
	if e := checkContentType(r); e != nil {
		return nil, e
	}
	return h.readBody(w, r)
}

// ask is what a request asks for, as readRequest found it.
type ask struct {
	req  genRequest
	tool *toolRuntime
	lang string // the BCP 47 tag of the request's language
	sse  bool   // the client accepts text/event-stream
	idem string // Idempotency-Key, if sent
	// fingerprint is the SHA-256 of the body (hex), sent with an Idempotency-Key.
	fingerprint string
	// chat is what a chat completion asks beyond this (chat.go); nil for POST /api/v1/generate.
	chat *chatAsk
}

// genRequest is the body of POST /api/v1/generate (docs/USING-THE-API.md: request fields).
type genRequest struct {
	Tool     string
	Input    string
	Language string
	Tone     string
	seen     uint8 // bit set of the fields present
}

const (
	fieldTool = 1 << iota
	fieldInput
	fieldLanguage
	fieldTone
)

// checkContentType accepts application/json with an optional utf-8 charset.
func checkContentType(r *http.Request) *apiError {
	ct := r.Header.Get("Content-Type")
	if ct == "application/json" {
		return nil // the common case, without parsing
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return errUnsupportedMedia
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		e := *errUnsupportedMedia
		e.Message = "the request body must be UTF-8 JSON (charset " + cs + " is not supported)"
		return &e
	}
	return nil
}

var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readBody reads at most limit bytes of the request body into a pooled buffer.
// The caller returns the buffer with bodyPool.Put after use.
func readBody(r *http.Request, limit int64) (*bytes.Buffer, *apiError) {
	tooLarge := func() *apiError {
		return newError(http.StatusRequestEntityTooLarge, "body_too_large", "",
			fmt.Sprintf("the request body is larger than %d bytes", limit))
	}
	if r.ContentLength > limit {
		return nil, tooLarge()
	}
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	n, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	if err != nil {
		bodyPool.Put(buf)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge()
		}
		return nil, newError(http.StatusBadRequest, "invalid_json", "", "the request body could not be read: "+err.Error())
	}
	if n > limit {
		bodyPool.Put(buf)
		return nil, tooLarge()
	}
	return buf, nil
}

// parseGenRequest decodes the body strictly: one JSON object, string fields of the schema only,
// no duplicates, nothing after the object. It reports the first problem as an apiError.
func parseGenRequest(body []byte) (genRequest, *apiError) {
	var req genRequest
	if !utf8.Valid(body) {
		return req, newError(http.StatusBadRequest, "invalid_utf8", "input", "the request body is not valid UTF-8")
	}
	if loneSurrogate(body) {
		return req, newError(http.StatusBadRequest, "invalid_utf8", "input",
			`the request body holds a lone UTF-16 surrogate (such as \ud800), which is not Unicode text`)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return req, newError(http.StatusBadRequest, "invalid_json", "", "the request body is empty; send a JSON object with tool, input and language")
		}
		return req, invalidJSON(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return req, newError(http.StatusBadRequest, "invalid_json", "", "the request body must be a JSON object")
	}
	for dec.More() {
		tok, err = dec.Token()
		if err != nil {
			return req, invalidJSON(err)
		}
		name, _ := tok.(string)
		var bit uint8
		var dst *string
		switch name {
		case "tool":
			bit, dst = fieldTool, &req.Tool
		case "input":
			bit, dst = fieldInput, &req.Input
		case "language":
			bit, dst = fieldLanguage, &req.Language
		case "tone":
			bit, dst = fieldTone, &req.Tone
		default:
			return req, newError(http.StatusBadRequest, "unknown_field", name,
				fmt.Sprintf("unknown field %q; the fields are tool, input, language and tone", name))
		}
		if req.seen&bit != 0 {
			return req, newError(http.StatusBadRequest, "invalid_field", name, fmt.Sprintf("field %q appears more than once", name))
		}
		req.seen |= bit
		tok, err = dec.Token()
		if err != nil {
			return req, invalidJSON(err)
		}
		s, ok := tok.(string)
		if !ok {
			if tok == nil && bit == fieldTone {
				req.seen &^= fieldTone // "tone": null is the same as leaving it out
				continue
			}
			return req, newError(http.StatusBadRequest, "invalid_field", name, fmt.Sprintf("field %q must be a string", name))
		}
		*dst = s
	}
	if _, err = dec.Token(); err != nil { // the closing brace
		return req, invalidJSON(err)
	}
	if _, err = dec.Token(); err != io.EOF {
		return req, newError(http.StatusBadRequest, "invalid_json", "", "unexpected data after the JSON object")
	}
	for _, f := range [...]struct {
		bit  uint8
		name string
	}{{fieldTool, "tool"}, {fieldInput, "input"}, {fieldLanguage, "language"}} {
		if req.seen&f.bit == 0 {
			return req, newError(http.StatusBadRequest, "missing_field", f.name, fmt.Sprintf("field %q is required", f.name))
		}
	}
	return req, nil
}

func invalidJSON(err error) *apiError {
	msg := "the request body is not valid JSON"
	var se *json.SyntaxError
	if errors.As(err, &se) {
		msg = fmt.Sprintf("the request body is not valid JSON (at byte %d: %s)", se.Offset, se.Error())
	} else if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
		msg = "the request body ends before the JSON object is complete"
	}
	return newError(http.StatusBadRequest, "invalid_json", "", msg)
}

// validate checks the values of the fields (their presence and types were checked by parsing)
// and names the request's language in req. It returns the tool and the language's tag as far as
// it found them.
func (h *Handler) validate(req *genRequest) (tool *toolRuntime, lang string, e *apiError) {
	tool, ok := h.tools[req.Tool]
	if !ok {
		return nil, "", newError(http.StatusBadRequest, "unknown_tool", "tool",
			fmt.Sprintf("tool %q is not one of the %d tools; see GET /api/v1/tools", truncate(req.Tool, 64), len(h.tools)))
	}
	tag, name, ok := h.languages.Match(req.Language)
	if !ok {
		return tool, "", newError(http.StatusBadRequest, "unsupported_language", "language",
			fmt.Sprintf("language %q is not supported; use a BCP 47 tag such as de, en, tr or pt-BR (GET /api/v1/tools lists them)", truncate(req.Language, 64)))
	}
	req.Language = name
	if req.seen&fieldTone != 0 && !catalog.IsTone(req.Tone) {
		return tool, tag, newError(http.StatusBadRequest, "invalid_tone", "tone",
			fmt.Sprintf("tone %q is not allowed; use one of %s, or leave it out", truncate(req.Tone, 64), strings.Join(catalog.Tones, ", ")))
	}
	if e := checkInput(req.Input); e != nil {
		return tool, tag, e
	}
	return tool, tag, nil // the input's length is checked with the model's context (fitContext)
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

// timeoutBody notes whether reading the request body hit the read deadline.
type timeoutBody struct {
	io.ReadCloser
	timedOut bool
}

func (b *timeoutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.timedOut {
		var ne net.Error
		b.timedOut = errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	}
	return n, err
}

// readBody reads the request body within BodyReadTimeout: a client that sends it slower gets
// 408 request_timeout instead of holding a connection and a handler open.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (*bytes.Buffer, *apiError) {
	d := time.Duration(h.BodyReadTimeout)
	if d <= 0 {
		return readBody(r, h.MaxBodyBytes)
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return readBody(r, h.MaxBodyBytes) // the connection cannot take deadlines
	}
	// Cleared at once: after the body, the server reads on in the background to notice a
	// client that goes away, and that read must not time out mid-stream.
	defer rc.SetReadDeadline(time.Time{})
	tb := &timeoutBody{ReadCloser: r.Body}
	r.Body = tb
	buf, e := readBody(r, h.MaxBodyBytes)
	if e != nil && tb.timedOut {
		return nil, newError(http.StatusRequestTimeout, "request_timeout", "",
			fmt.Sprintf("the request body did not arrive within %s; no credit was charged", fmtWindow(d)))
	}
	return buf, e
}
