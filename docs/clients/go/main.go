// Command go is a caddy-textgen client in Go, standard library only (docs/API.md):
//
//	TEXTGEN_KEY=tg_live_... go run ./docs/clients/go '{"tool":"summarizer","input":"...","language":"en"}' [idempotency-key]
//
// It streams the text to stdout as it is generated (server-sent events) and handles every error
// class: 402 prints where to buy credits (exit 2); 429 and 409 wait Retry-After; 502/503/504 retry
// with backoff; a cut stream resumes the kept generation after its last event (GET
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

// APIError is an error answer of the API.
type APIError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *APIError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

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
			e := &APIError{Status: resp.StatusCode}
			var b struct{ Error *APIError }
			if json.NewDecoder(resp.Body).Decode(&b) == nil && b.Error != nil {
				e.Code, e.Message = b.Error.Code, b.Error.Message
			}
			resp.Body.Close()
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			switch resp.StatusCode {
			case http.StatusConflict, http.StatusTooManyRequests: // busy with this key / over a limit
				fmt.Fprintf(c.Log, "%s: waiting %d s\n", e.Code, wait)
				time.Sleep(max(time.Duration(wait)*time.Second, time.Second))
				continue
			case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
				d := max(time.Duration(wait)*time.Second, backoff) // the model server failed; nothing charged
				fmt.Fprintf(c.Log, "%s: retrying in %v\n", e.Code, d)
				time.Sleep(d)
				backoff = min(backoff*2, 30*time.Second)
				continue
			}
			return nil, e // 402: the message says where to buy; others: a request to fix
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
				e.Error.Status = http.StatusBadGateway
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
		fmt.Fprintln(os.Stderr, "out of credits:", apiErr.Message)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "error", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "\n[request %s: %d credit used, %d left]\n", done.RequestID, done.CreditsUsed, done.CreditsRemaining)
}
