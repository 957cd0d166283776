package operator

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// The progress of a long admin call (GET /textgen/ledger/verify?progress=1s), streamed to the
// CLI as JSON lines, and what the CLI's long commands show of it (cli_progress.go).

// ndjsonType is the Content-Type of a stream of JSON lines.
const ndjsonType = "application/x-ndjson"

// progressStream writes a call's progress lines, and then its answer, as JSON lines.
type progressStream struct {
	w       http.ResponseWriter
	every   time.Duration
	started bool      // the status line and the first line are sent
	last    time.Time // when the last progress line was sent
	broken  bool      // a write failed: the client is gone
}

// progress sends {"progress":{"done":N,"total":M}} the first time and then at most once every
// s.every; it is the call's ledger.ProgressFunc.
func (s *progressStream) progress(done, total int64) {
	t := time.Now()
	if s.started && t.Sub(s.last) < s.every {
		return
	}
	if !s.started {
		s.w.Header().Set("Content-Type", ndjsonType)
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	s.last = t
	type counts struct {
		Done  int64 `json:"done"`
		Total int64 `json:"total"`
	}
	s.line(struct {
		Progress counts `json:"progress"`
	}{counts{done, total}})
}

// line sends v as one JSON line, at once.
func (s *progressStream) line(v any) {
	if s.broken {
		return
	}
	b, err := json.Marshal(v)
	if err == nil {
		_, err = s.w.Write(append(b, '\n'))
	}
	if err == nil {
		err = http.NewResponseController(s.w).Flush()
	}
	if err != nil {
		s.broken = true
		caddy.Log().Named("admin.api.textgen").Debug("writing the response: " + err.Error())
	}
}

// fail ends the stream with err as the admin API answers an error, its message and its status
// in a line ({"error":"...","status":N}), and logs it as Caddy logs a failed admin request.
func (s *progressStream) fail(err error) {
	ae := caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: err}
	errors.As(err, &ae)
	msg := ae.Message
	if msg == "" && ae.Err != nil {
		msg = ae.Err.Error()
	}
	caddy.Log().Named("admin.api").Error("request error", zap.Error(err), zap.Int("status_code", ae.HTTPStatus))
	s.line(struct {
		Error  string `json:"error"`
		Status int    `json:"status"`
	}{msg, ae.HTTPStatus})
}
