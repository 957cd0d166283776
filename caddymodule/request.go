package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"
)

// genRequest is the body of POST /api/v1/generate (CONTRACT section 1).
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
