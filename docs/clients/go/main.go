// Command go is a caddy-textgen client in Go, standard library only (docs/API.md):
//
//	TEXTGEN_KEY=tg_live_... go run ./docs/clients/go '{"tool":"summarizer","input":"...","language":"en"}' [idempotency-key]
//
// It streams the text to stdout as it is generated (server-sent events) and handles every error
// code of the API (Messages; `go run ./docs/clients/go --codes` prints them): a 402 says what ran
// out (the account's credits, where to buy more; this key's budget, when it resets; a member's
// cap) and exits 2; 409, 429 and 502/503/504 are retried after Retry-After (or a backoff when
// there is none), up to MaxWait a wait and 8 attempts, else the *APIError is returned with its
// RetryAfter; a cut stream resumes the kept generation after its last event (GET
// /api/v1/generations/{id} with Last-Event-ID), and a request cut before its answer is retried
// with the same Idempotency-Key, so nothing is generated or charged twice.
package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// MaxWait is the longest Retry-After waited out; a longer one is returned to the caller.
const MaxWait = time.Minute

// Messages says what each error code of the API (docs/openapi.json) means for the caller; the
// server's own message adds the details.
var Messages = map[string]string{
	"invalid_json":                 "the request body is not valid JSON",
	"missing_field":                "a required field is missing",
	"invalid_field":                "a field has a value the API does not accept",
	"unknown_field":                "the request has a field the API does not know",
	"empty_input":                  "the input is empty",
	"invalid_utf8":                 "the input is not valid UTF-8 text",
	"unknown_tool":                 "there is no such tool (GET /api/v1/tools lists them)",
	"unsupported_language":         "the tool does not support this language",
	"invalid_tone":                 "the tool has no such tone",
	"conflicting_api_keys":         "the request carries two different API keys; send one",
	"missing_api_key":              "no API key was sent (set TEXTGEN_KEY)",
	"invalid_api_key":              "the API key is not valid (unknown, revoked or mistyped)",
	"key_expired":                  "the API key has expired; make a new one in My Account",
	"insufficient_credits":         "out of credits",
	"key_budget_exhausted":         "this key's budget is used up",
	"member_cap_reached":           "your monthly credit cap in this organisation is used up; its owner can raise it",
	"account_disabled":             "the account is disabled; contact support",
	"tool_not_allowed":             "this key may not use this tool",
	"address_not_allowed":          "this key may not be used from this address",
	"code_not_redeemable":          "this code cannot be redeemed (unknown, disabled, expired or used up)",
	"code_already_redeemed":        "this account has already redeemed this code",
	"live_key_required":            "send a live key (tg_live_...) for this",
	"not_found":                    "no such resource",
	"method_not_allowed":           "the API does not take this method here",
	"request_timeout":              "the request took too long to arrive",
	"idempotency_in_progress":      "a request with this Idempotency-Key is still running",
	"input_too_large":              "the input is too long for the tool",
	"body_too_large":               "the request body is too large",
	"unsupported_media_type":       "the request body must be JSON (Content-Type: application/json)",
	"idempotency_key_reused":       "this Idempotency-Key was used for another request; use a new one",
	"range_not_satisfiable":        "the resume point is past the end of the text",
	"rate_limited":                 "too many requests; slow down",
	"too_many_concurrent_requests": "too many requests at once",
	"internal_error":               "the server failed; nothing was charged",
	"backend_error":                "the model failed; nothing was charged",
	"backend_unavailable":          "the model server is unreachable; nothing was charged",
	"backend_timeout":              "the model server took too long; nothing was charged",
	"ledger_unavailable":           "the server takes no new work now; nothing was charged",
	"overloaded":                   "the model server is busy; nothing was charged",
}

// APIError is an error answer of the API: its code, the server's message, and when to retry
// (RetryAfter, from Retry-After; -1 without one) or when a key's budget resets (ResetsAt).
type APIError struct {
	Status     int
	Code       string `json:"code"`
	Message    string `json:"message"`
	ResetsAt   string `json:"resets_at"`
	RetryAfter time.Duration
}

// Explanation is what the error's code means for the caller.
func (e *APIError) Explanation() string {
	text, ok := Messages[e.Code]
	if !ok {
		text = "the server refused the request"
	}
	if e.Code == "key_budget_exhausted" {
		if e.ResetsAt != "" {
			text += "; resets at " + e.ResetsAt
		} else {
			text += "; it does not reset (a total budget)"
		}
	}
	return text
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s: %s", e.Status, e.Code, e.Explanation(), e.Message)
}

// Done is the done event: the text is complete.
type Done struct {
	CreditsUsed      int    `json:"credits_used"`
	CreditsRemaining int    `json:"credits_remaining"`
	RequestID        string `json:"request_id"`
}

// Client calls one server with one key.
type Client struct {
	API, Key string
	HTTP     *http.Client
	Log      io.Writer
}

// Generate streams one text to out and returns the done event.
func (c *Client) Generate(body any, idempotencyKey string, out io.Writer) (*Done, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	rid, lastID, backoff := "", 0, time.Second
	for try := 0; try < 8; try++ {
		var req *http.Request
		if rid == "" { // a new generation; the same Idempotency-Key makes a retry free
			req, _ = http.NewRequest(http.MethodPost, c.API+"/api/v1/generate", bytes.NewReader(payload))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", idempotencyKey)
		} else { // resume the kept generation after the last event we have, at no charge
			req, _ = http.NewRequest(http.MethodGet, c.API+"/api/v1/generations/"+rid, nil)
			req.Header.Set("Last-Event-ID", strconv.Itoa(lastID))
		}
		req.Header.Set("Authorization", "Bearer "+c.Key) // Caddy's access log redacts it
		req.Header.Set("Accept", "text/event-stream")
		resp, err := c.HTTP.Do(req)
		if err != nil {
			fmt.Fprintf(c.Log, "connection failed (%v); retrying\n", err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			e := &APIError{Status: resp.StatusCode, Code: "http_error", Message: resp.Status, RetryAfter: -1}
			var b struct{ Error *APIError }
			if json.NewDecoder(resp.Body).Decode(&b) == nil && b.Error != nil {
				e.Code, e.Message, e.ResetsAt = b.Error.Code, b.Error.Message, b.Error.ResetsAt
			}
			resp.Body.Close()
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
				e.RetryAfter = time.Duration(max(s, 0)) * time.Second
			}
			switch resp.StatusCode {
			case http.StatusConflict, http.StatusTooManyRequests: // busy with this key / over a limit
				wait := time.Second
				if e.RetryAfter >= 0 {
					wait = e.RetryAfter
				}
				if wait > MaxWait {
					return nil, e // longer than we wait: the caller decides (e.RetryAfter)
				}
				fmt.Fprintf(c.Log, "%s: waiting %d s\n", e.Code, int(wait.Seconds()))
				time.Sleep(max(wait, time.Second))
				continue
			case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
				wait := backoff // the model server failed; nothing charged
				if e.RetryAfter >= 0 {
					wait = e.RetryAfter
				}
				if wait > MaxWait {
					return nil, e
				}
				fmt.Fprintf(c.Log, "%s: retrying in %v\n", e.Code, wait)
				time.Sleep(wait)
				backoff = min(backoff*2, 30*time.Second)
				continue
			}
			return nil, e // 402: what ran out; others: a request to fix (400, 401, 403, 404, 413...)
		}
		if rid == "" {
			if rid = resp.Header.Get("X-Generation-Id"); rid == "" {
				rid = resp.Header.Get("X-Request-Id")
			}
		}
		done, err := readEvents(resp.Body, out, &lastID)
		resp.Body.Close()
		var apiErr *APIError
		var outErr *OutputError
		switch {
		case done != nil:
			return done, nil
		case errors.As(err, &apiErr), errors.As(err, &outErr):
			return nil, err
		case err != nil:
			fmt.Fprintf(c.Log, "connection cut (%v); resuming\n", err)
		default:
			fmt.Fprintln(c.Log, "the stream ended early; resuming")
		}
	}
	return nil, errors.New("gave up after 8 tries")
}

// OutputError is a failed write of the text (a closed pipe, a full disk): not a network fault,
// so Generate gives up instead of resuming.
type OutputError struct{ Err error }

func (e *OutputError) Error() string { return "writing the text: " + e.Err.Error() }
func (e *OutputError) Unwrap() error { return e.Err }

// readEvents writes the deltas of an SSE body to out, noting the id of each event in lastID,
// and returns the done event (nil if the body ends without one).
func readEvents(body io.Reader, out io.Writer, lastID *int) (*Done, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	event, data, id := "", "", -1
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id:"):
			id, _ = strconv.Atoi(strings.TrimSpace(line[3:]))
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimSpace(line[5:])
		case line == "" && event != "":
			switch event {
			case "delta":
				var d struct{ Text string }
				if err := json.Unmarshal([]byte(data), &d); err != nil {
					return nil, err
				}
				if _, err := io.WriteString(out, d.Text); err != nil {
					return nil, &OutputError{err} // not a cut stream: resuming would not help
				}
			case "done":
				var d Done
				return &d, json.Unmarshal([]byte(data), &d)
			case "error": // the model failed: nothing was charged
				var e struct{ Error APIError }
				json.Unmarshal([]byte(data), &e)
				e.Error.Status, e.Error.RetryAfter = http.StatusBadGateway, -1
				return nil, &e.Error
			}
			if id >= 0 {
				*lastID = id
			}
			event, data, id = "", "", -1
		}
	}
	return nil, sc.Err()
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--codes" { // the error codes this client knows, with what it says
		b, _ := json.MarshalIndent(Messages, "", " ")
		fmt.Println(string(b))
		return
	}
	key := os.Getenv("TEXTGEN_KEY")
	if key == "" || len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, `usage: TEXTGEN_KEY=... go run ./docs/clients/go '{"tool":...}' [idempotency-key]`)
		os.Exit(1)
	}
	api := strings.TrimSuffix(os.Getenv("TEXTGEN_URL"), "/")
	if api == "" {
		api = "http://localhost:8080"
	}
	var body any
	if err := json.Unmarshal([]byte(os.Args[1]), &body); err != nil {
		fmt.Fprintln(os.Stderr, "the request is not JSON:", err)
		os.Exit(1)
	}
	idem := rand.Text()
	if len(os.Args) > 2 {
		idem = os.Args[2]
	}
	c := &Client{API: api, Key: key, HTTP: &http.Client{}, Log: os.Stderr}
	done, err := c.Generate(body, idem, os.Stdout)
	var apiErr *APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusPaymentRequired:
		fmt.Fprintln(os.Stderr, "error", err) // credits, a key's budget or a member's cap ran out
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "error", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "\n[request %s: %d credit used, %d left]\n", done.RequestID, done.CreditsUsed, done.CreditsRemaining)
}
