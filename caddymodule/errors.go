package caddymodule

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// apiError is one error answer (docs/API.md, "Errors"; docs/openapi.json lists every code). It is written as
// {"error": {"code", "message", "param", "request_id"}} with Content-Type application/json.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	// ResetsAt is when a spent budget of the key resets (key_budget_exhausted; RFC 3339, UTC).
	ResetsAt string `json:"resets_at,omitempty"`
	// CreditsRequired is the price of the tool that was asked for (insufficient_credits).
	CreditsRequired int64 `json:"credits_required,omitempty"`
	// RequestID is filled in, on a copy, when the error is written.
	RequestID string `json:"request_id"`
	// RetryAfter, when > 0, is sent as Retry-After (whole seconds, rounded up).
	RetryAfter time.Duration `json:"-"`
	// Allow is sent as the Allow header (405 only).
	Allow string `json:"-"`
	// kind names the refusal in the log line, the trace and the metrics where it is finer than
	// Code (queue_full, an overloaded model host's queue); empty: Code.
	kind string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// as is a copy of e that the log names kind (e may be one of the shared values below).
func (e *apiError) as(kind string) *apiError {
	c := *e
	c.kind = kind
	return &c
}

// logKind is what the log line calls the refusal.
func (e *apiError) logKind() string {
	if e.kind != "" {
		return e.kind
	}
	return e.Code
}

func newError(status int, code, param, message string) *apiError {
	return &apiError{Status: status, Code: code, Param: param, Message: message}
}

// errorBody is the JSON envelope of an error answer.
type errorBody struct {
	Error *apiError `json:"error"`
}

// writeError answers with e. remaining < 0 means the key was not valid, so
// X-Credits-Remaining is left out.
func writeError(w http.ResponseWriter, requestID string, e *apiError, remaining int64) {
	// The request id goes into a copy: e may be one of the shared values below.
	c := *e
	c.RequestID = requestID
	body, _ := json.Marshal(errorBody{Error: &c})
	writeErrorBody(w, requestID, e, remaining, append(body, '\n'))
}

// writeErrorBody answers e with body, with the headers of every error answer.
func writeErrorBody(w http.ResponseWriter, requestID string, e *apiError, remaining int64, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Request-Id", requestID)
	h.Set("X-Credits-Used", "0")
	if remaining >= 0 {
		h.Set("X-Credits-Remaining", strconv.FormatInt(remaining, 10))
	}
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	}
	if e.Allow != "" {
		h.Set("Allow", e.Allow)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
}

// writeJSON answers a GET or HEAD with status and v as JSON (the body only for GET), with
// X-Request-Id and no caching; extra headers are set on w before the call.
func writeJSON(w http.ResponseWriter, r *http.Request, reqID string, status int, v any) {
	body, _ := json.Marshal(v)
	body = append(body, '\n')
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Request-Id", reqID)
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// The errors a client can cause, with the codes of docs/API.md's "Errors" table.
var (
	errMethodNotAllowedPOST = &apiError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: "this endpoint accepts only POST", Allow: "POST"}
	errMethodNotAllowedGET  = &apiError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: "this endpoint accepts only GET and HEAD", Allow: "GET, HEAD"}
	errNotFound             = &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no such endpoint; the API has POST /api/v1/generate, POST /api/v1/chat/completions, GET /api/v1/models, GET /api/v1/generations/{request_id}, GET /api/v1/tools, GET /api/v1/balance, GET /api/v1/usage, POST /api/v1/credits/redeem, GET /api/v1/ready and GET /api/v1/openapi.json (its description)"}
	errMissingKey           = &apiError{Status: http.StatusUnauthorized, Code: "missing_api_key", Message: "send your API key in the X-API-Key header or as Authorization: Bearer <key>"}
	errConflictingKeys      = &apiError{Status: http.StatusBadRequest, Code: "conflicting_api_keys", Message: "the X-API-Key and Authorization: Bearer headers name different keys; send one"}
	errInvalidKey           = &apiError{Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: "the API key is not valid"}
	errAccountDisabled      = &apiError{Status: http.StatusForbidden, Code: "account_disabled", Message: "this account is disabled; contact the operator of this service"}
	errUnsupportedMedia     = &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Message: "send the request body as JSON with Content-Type: application/json"}
	errLedgerUnavailable    = &apiError{Status: http.StatusServiceUnavailable, Code: "ledger_unavailable", Message: "the credit ledger cannot take a write now; no credit was charged; retry shortly", RetryAfter: 5 * time.Second}
	errInternal             = &apiError{Status: http.StatusInternalServerError, Code: "internal_error", Message: "an internal error occurred; no credit was charged; quote the request id when reporting it"}
)

// memberCapReached is the 402 of a key whose member of an organisation has used up their
// monthly credit cap at t (ledger.ErrMemberCapReached): nothing was charged, and the answer says
// when the cap's UTC month ends (also as Retry-After) and who can raise it.
func memberCapReached(t time.Time) *apiError {
	resets := ledger.MemberCapResets(t)
	return &apiError{Status: http.StatusPaymentRequired, Code: "member_cap_reached",
		Message: "your monthly credit cap in this organisation is used up; it resets at " + resets.Format(time.RFC3339) +
			" (the start of the next UTC month), or an owner of the organisation can raise it in My Account",
		RetryAfter: resets.Sub(t)}
}
