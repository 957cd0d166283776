package caddymodule

// The API document (docs/openapi.json) against the real server: every answer the tests below
// provoke must validate against it (status, content type, required headers, JSON body, SSE
// events), and every (status, error code) pair it documents must be provoked, on every
// operation of the OpenAI-compatible paths each (status, code) and each 200 content type.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/caddy-textgen/textgen/caddymodule/internal/apitest"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/docs"
	"github.com/caddy-textgen/textgen/ledger"
)

// notProvoked are the documented pairs no request can cause against a healthy in-process
// server, with where they are covered instead.
var notProvoked = map[string]string{
	"500 internal_error": "a bug by definition: no request causes it on purpose",
	"503 ledger_unavailable": "needs a full disk under the ledger: binarytest's TestServerOnFullDisk provokes it in a Caddy " +
		"process of its own and checks it against the document",
}

// notProvokedOp are the answers of the OpenAI-compatible operations, beyond notProvoked's pairs,
// that no request can cause against a healthy in-process server.
var notProvokedOp = map[string]string{
	"GET /api/v1/models 503 overloaded":      "a request that reaches a configuration a reload has just replaced",
	"GET /api/v1/models/{id} 503 overloaded": "a request that reaches a configuration a reload has just replaced",
}

// conformance checks answers against the API document and notes the error pairs it saw.
type conformance struct {
	t       *testing.T
	client  *http.Client
	v       validator.Validator
	model   *v3.Document
	sv      schema_validation.SchemaValidator
	streams map[string]*eventStream // the name of a text/event-stream schema -> its events
	raw     map[string]any          // the document as JSON, its $refs as written

	mu     sync.Mutex
	seen   map[string]bool // "402 insufficient_credits"
	seenOp map[string]bool // "POST /api/v1/chat/completions 402 insufficient_credits", "... 200 text/event-stream"
}

// eventStream is a text/event-stream schema of the document: the schema of each event's data
// by the event's name (x-events; an event without a name is "message", as in SSE), and the data
// of a last event that is not JSON (x-last-data: OpenAI's [DONE]).
type eventStream struct {
	events map[string]*base.Schema
	last   string
}

func newConformance(t *testing.T, client *http.Client) *conformance {
	t.Helper()
	doc, err := libopenapi.NewDocument(strictDocument(t))
	if err != nil {
		t.Fatal(err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	c := &conformance{t: t, client: client, v: v, model: &model.Model, sv: schema_validation.NewSchemaValidator(),
		streams: map[string]*eventStream{}, seen: map[string]bool{}, seenOp: map[string]bool{}}
	if err := json.Unmarshal(docs.OpenAPI, &c.raw); err != nil {
		t.Fatal(err)
	}
	// The events of a text/event-stream answer are named in its schema's x-events (EventStream,
	// ChatCompletionStream).
	var raw struct {
		Components struct {
			Schemas map[string]struct {
				Events map[string]struct {
					Ref string `json:"$ref"`
				} `json:"x-events"`
				Last string `json:"x-last-data"`
			}
		}
	}
	if err := json.Unmarshal(docs.OpenAPI, &raw); err != nil {
		t.Fatal(err)
	}
	for stream, s := range raw.Components.Schemas {
		if s.Events == nil {
			continue
		}
		es := &eventStream{events: map[string]*base.Schema{}, last: s.Last}
		for name, ev := range s.Events {
			es.events[name] = c.schema(ev.Ref)
		}
		c.streams[stream] = es
	}
	if len(c.streams) < 2 {
		t.Fatalf("the document names the events of %d streams, want EventStream and ChatCompletionStream", len(c.streams))
	}
	return c
}

// schema is the component schema of ref (#/components/schemas/Name, or Name), strict.
func (c *conformance) schema(ref string) *base.Schema {
	c.t.Helper()
	sp := c.model.Components.Schemas.GetOrZero(strings.TrimPrefix(ref, "#/components/schemas/"))
	if sp == nil {
		c.t.Fatalf("no schema %s in the document", ref)
	}
	return sp.Schema()
}

// do sends req and checks its answer; it returns the answer with its whole body.
func (c *conformance) do(req *http.Request) (*http.Response, []byte) {
	c.t.Helper()
	resp, err := c.client.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	return resp, c.check(req, resp)
}

// check reads resp's body and checks the answer against the document.
func (c *conformance) check(req *http.Request, resp *http.Response) []byte {
	c.t.Helper()
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatalf("%s %s: reading the answer: %v", req.Method, req.URL.Path, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	what := fmt.Sprintf("%s %s -> %d", req.Method, req.URL.Path, resp.StatusCode)
	vreq := req
	tmpl, methods := c.pathOf(req.URL.Path)
	if resp.StatusCode == http.StatusNotFound && tmpl == "" {
		// A path the API does not have: under /api/v1/chat/ its 404 is OpenAI's shape, elsewhere
		// the one the document states for unknown generations (the description says so).
		if strings.HasPrefix(req.URL.Path, "/api/v1/chat/") {
			c.checkUnknownOpenAIPath(what, resp, body)
			return body
		}
		vreq = req.Clone(context.Background())
		vreq.Method, vreq.URL.Path = http.MethodGet, generationsPath+"req_0"
	}
	if resp.StatusCode == http.StatusMethodNotAllowed {
		// OpenAPI cannot describe a method a path does not have: the 405 answer is checked
		// against the 405 response of the path's own operation.
		vreq = req.Clone(context.Background())
		vreq.Method = http.MethodGet
		if len(methods) > 0 {
			vreq.Method = strings.ToUpper(methods[0])
		}
	}
	if ok, errs := c.v.ValidateHttpResponse(vreq, resp); !ok {
		for _, e := range errs {
			c.t.Errorf("%s: %s: %s", what, e.Message, e.Reason)
			for _, s := range e.SchemaValidationErrors {
				c.t.Errorf("  %s: %s", s.KeywordLocation, s.Reason)
			}
		}
		c.t.Errorf("%s: the answer was %v %s", what, resp.Header, body)
	}
	ct := resp.Header.Get("Content-Type")
	mt, _, _ := strings.Cut(ct, ";")
	op := vreq.Method + " " + tmpl + " " + strconv.Itoa(resp.StatusCode) + " "
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		c.checkEvents(what, body, c.streamOf(tmpl, vreq.Method, resp.StatusCode))
	case strings.HasPrefix(ct, "application/json") && resp.StatusCode >= 400:
		var b apiErrBody
		if err := json.Unmarshal(body, &b); err == nil && b.Error.Code != "" {
			if codes := c.codesOf(vreq, resp.StatusCode); !slices.Contains(codes, b.Error.Code) {
				c.t.Errorf("%s: code %q is not among the answer's x-error-codes %v", what, b.Error.Code, codes)
			}
			c.mu.Lock()
			c.seen[strconv.Itoa(resp.StatusCode)+" "+b.Error.Code] = true
			c.mu.Unlock()
			mt = b.Error.Code
		}
	}
	if tmpl != "" {
		c.mu.Lock()
		c.seenOp[op+mt] = true
		c.mu.Unlock()
	}
	return body
}

// pathOf is the document's path that p is (its template) and the methods of its operations;
// "" when the document has no such path.
func (c *conformance) pathOf(p string) (string, []string) {
	found := ""
	for tmpl := range c.model.Paths.PathItems.KeysFromOldest() {
		if tmpl == p {
			found = tmpl
			break
		}
		if found == "" && pathMatches(tmpl, p) {
			found = tmpl
		}
	}
	if found == "" {
		return "", nil
	}
	var methods []string
	for m := range c.model.Paths.PathItems.GetOrZero(found).GetOperations().KeysFromOldest() {
		methods = append(methods, m)
	}
	return found, methods
}

// checkUnknownOpenAIPath checks the 404 of a path under /api/v1/chat/ that the API does not
// have: not_found in OpenAI's shape (OpenAIErrorBody), as the document's description states.
func (c *conformance) checkUnknownOpenAIPath(what string, resp *http.Response, body []byte) {
	c.t.Helper()
	var b apiErrBody
	if ok, errs := c.sv.ValidateSchemaString(c.schema("OpenAIErrorBody"), string(body)); !ok {
		for _, e := range errs {
			c.t.Errorf("%s: %s %s", what, e.Message, e.Reason)
		}
	} else if err := json.Unmarshal(body, &b); err != nil || b.Error.Code != "not_found" {
		c.t.Errorf("%s: want code not_found: %s", what, body)
	}
	if resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("X-Credits-Used") != "0" {
		c.t.Errorf("%s: the headers of an error answer are missing: %v", what, resp.Header)
	}
}

// streamOf is the event stream the document gives the text/event-stream answer with status to
// method on tmpl (nil: none).
func (c *conformance) streamOf(tmpl, method string, status int) *eventStream {
	get := func(v any, keys ...string) any {
		for _, k := range keys {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		return v
	}
	r := get(c.raw, "paths", tmpl, strings.ToLower(method), "responses", strconv.Itoa(status))
	if ref, ok := get(r, "$ref").(string); ok {
		r = get(c.raw, "components", "responses", strings.TrimPrefix(ref, "#/components/responses/"))
	}
	ref, _ := get(r, "content", "text/event-stream", "schema", "$ref").(string)
	return c.streams[strings.TrimPrefix(ref, "#/components/schemas/")]
}

// checkEvents checks every event of an SSE body against the schema of its name in st, the
// stream the document states for the answer.
func (c *conformance) checkEvents(what string, body []byte, st *eventStream) {
	c.t.Helper()
	if st == nil {
		c.t.Errorf("%s: the document has no event stream for this answer", what)
		return
	}
	evs, err := readSSE(bytes.NewReader(body))
	if err != nil || len(evs) == 0 {
		c.t.Errorf("%s: no events (%v): %q", what, err, body)
	}
	for i, ev := range evs {
		if st.last != "" && ev.data == st.last {
			if i != len(evs)-1 {
				c.t.Errorf("%s: %s is event %d of %d, not the last", what, st.last, i+1, len(evs))
			}
			continue
		}
		name := ev.name
		if name == "" {
			name = "message"
		}
		s := st.events[name]
		if s == nil {
			c.t.Errorf("%s: event %q is not documented", what, name)
			continue
		}
		if ok, errs := c.sv.ValidateSchemaString(s, ev.data); !ok {
			for _, e := range errs {
				c.t.Errorf("%s: event %s %s: %s %s", what, ev.name, ev.data, e.Message, e.Reason)
			}
		}
	}
}

// documentedPairs are the (status, error code) pairs of every operation's error answers.
func (c *conformance) documentedPairs() map[string]bool {
	out := map[string]bool{}
	for _, item := range c.model.Paths.PathItems.FromOldest() {
		for _, op := range item.GetOperations().FromOldest() {
			for status, resp := range op.Responses.Codes.FromOldest() {
				for _, code := range errorCodes(resp) {
					out[status+" "+code] = true
				}
			}
		}
	}
	return out
}

// documentedOps are, for the operations tagged tag (every one: ""), "METHOD path status code"
// of each error code of their answers, and "METHOD path status type" of each content type of
// their other answers.
func (c *conformance) documentedOps(tag string) map[string]bool {
	out := map[string]bool{}
	for path, item := range c.model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			if tag != "" && !slices.Contains(op.Tags, tag) {
				continue
			}
			for status, resp := range op.Responses.Codes.FromOldest() {
				k := strings.ToUpper(method) + " " + path + " " + status + " "
				if codes := errorCodes(resp); len(codes) > 0 {
					for _, code := range codes {
						out[k+code] = true
					}
					continue
				}
				for ct := range resp.Content.KeysFromOldest() {
					out[k+ct] = true
				}
			}
		}
	}
	return out
}

// errorCodes are the codes an error answer may carry: its x-error-codes.
func errorCodes(resp *v3.Response) []string {
	if resp.Extensions == nil {
		return nil
	}
	node := resp.Extensions.GetOrZero("x-error-codes")
	if node == nil {
		return nil
	}
	var codes []string
	if err := node.Decode(&codes); err != nil {
		return nil
	}
	return codes
}

// codesOf are the x-error-codes of the answer with status to req's operation.
func (c *conformance) codesOf(req *http.Request, status int) []string {
	for path, item := range c.model.Paths.PathItems.FromOldest() {
		if !pathMatches(path, req.URL.Path) {
			continue
		}
		for method, op := range item.GetOperations().FromOldest() {
			if !strings.EqualFold(method, req.Method) {
				continue
			}
			if resp := op.Responses.Codes.GetOrZero(strconv.Itoa(status)); resp != nil {
				return errorCodes(resp)
			}
		}
	}
	return nil
}

// pathMatches reports whether path, whose segments may be templates ({name}), matches p.
func pathMatches(template, p string) bool {
	ts, ps := strings.Split(template, "/"), strings.Split(p, "/")
	if len(ts) != len(ps) {
		return false
	}
	for i := range ts {
		if ts[i] != ps[i] && !(strings.HasPrefix(ts[i], "{") && strings.HasSuffix(ts[i], "}")) {
			return false
		}
	}
	return true
}

// strictDocument is the API document with every object of an answer closed
// (additionalProperties: false): the document leaves answers open so that clients survive new
// fields, and this makes the tests catch a field the server sends that the document lacks.
func strictDocument(t *testing.T) []byte {
	t.Helper()
	out, err := apitest.StrictDocument(docs.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// chatBody is a chat completion request of model with one user message, input, and extra
// fields (JSON members, comma-separated).
func chatBody(model, input, extra string) string {
	msg, _ := json.Marshal(input)
	b := `{"model":"` + model + `","messages":[{"role":"user","content":` + string(msg) + `}]`
	if extra != "" {
		b += "," + extra
	}
	return b + "}"
}

func apiRequest(method, path, key string, body string, hdr ...string) *http.Request {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, baseURL+path, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] != "" {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	return req
}

// TestOpenAPIConformance provokes every documented answer of the real server and checks each
// against docs/openapi.json.
func TestOpenAPIConformance(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 5, Piece: "tok "})
	fs.Set(ollamatest.FaultConfig{Model: "stall", Mode: ollamatest.FaultStall})
	fs.Set(ollamatest.FaultConfig{Model: "busy", Mode: ollamatest.FaultBusy})
	fs.Set(ollamatest.FaultConfig{Model: "broken", Mode: ollamatest.FaultStatus, Status: 500})
	fs.Set(ollamatest.FaultConfig{Model: "cut", Mode: ollamatest.FaultErrorAfter, Pieces: 2, Piece: "tok "})
	e := newEnv(t, envOptions{ollama: fs.URL, firstPiece: "10s", // the stalls below end by it
		site: receiptsSite, matcher: "@textgen",
		limits: "rate_limit key 1000000/1m\n\t\trate_limit account 1000000/1m\n\t\tauth_failure_limit 3/1h\n\t\t" +
			"max_concurrent_per_account 2\n\t\tmax_in_flight 1000\n\t\tqueue_size 1000\n\t\tbody_read_timeout 1s",
		extra: "retention_key " + testRetentionKey + "\n\t\tmax_input_chars 100\n\t\tmax_body_size 2KiB\n\t\t" +
			"tool email-writer {\n\t\t\tmodel stall\n\t\t}\n\t\ttool cv-generator {\n\t\t\tmodel busy\n\t\t}\n\t\t" +
			"tool meeting-agenda {\n\t\t\tmodel broken\n\t\t}\n\t\ttool bug-report {\n\t\t\tmodel cut\n\t\t}"})
	c := newConformance(t, e.client)
	ctx := context.Background()
	_, key := e.account(40)
	_, brokeKey := e.account(0)
	_, cappedKey, _ := e.cappedMember(5)
	_, disabledKey := e.disabledAccount(5)
	_, otherKey := e.account(1)
	const gen, cc, models = "/api/v1/generate", "/api/v1/chat/completions", "/api/v1/models"
	good := genBody("summarizer", "x", "en", "")
	goodChat := chatBody("summarizer", "x", "")

	// The free helpers, and the document itself.
	if _, body := c.do(apiRequest("GET", "/api/v1/openapi.json", "", "")); !bytes.Equal(body, docs.OpenAPI) {
		t.Errorf("GET /api/v1/openapi.json is not docs/openapi.json")
	}
	for _, p := range []string{"/api/v1/openapi.json", "/api/v1/tools", "/api/v1/ready", "/api/v1/balance", "/api/v1/generations/req_0"} {
		c.do(apiRequest("POST", p, key, good))
	}
	c.do(apiRequest("GET", "/api/v1/tools", "", ""))
	c.do(apiRequest("GET", "/api/v1/ready", "", ""))
	c.do(apiRequest("GET", "/api/v1/balance", key, ""))
	c.do(apiRequest("GET", "/api/v1/balance", "", ""))
	c.do(apiRequest("GET", "/api/v1/balance", key, "", "Authorization", "Bearer "+otherKey))
	c.do(apiRequest("GET", "/api/v1/balance", disabledKey, ""))
	// An account with credits that expire: the balance says when.
	expAcct, expiringKey := e.account(1)
	if _, err := e.store.Grant(ctx, ledger.GrantRequest{AccountID: expAcct.ID, Mode: ledger.Live, Kind: ledger.KindGrant,
		Credits: 5, Expires: time.Now().Add(90 * 24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, body := c.do(apiRequest("GET", "/api/v1/balance", expiringKey, "")); !bytes.Contains(body, []byte(`"expiring":[{"credits":5,"expires":"`)) {
		t.Errorf("balance of expiring credits: %s", body)
	}
	c.do(apiRequest("GET", "/api/v1/usage", key, ""))
	c.do(apiRequest("GET", "/api/v1/usage?from=2026-01-01&to=2026-01-31", key, ""))
	c.do(apiRequest("GET", "/api/v1/usage?from=January", key, ""))
	c.do(apiRequest("GET", "/api/v1/usage", "", ""))
	c.do(apiRequest("GET", "/api/v1/usage", key, "", "Authorization", "Bearer "+otherKey))
	c.do(apiRequest("GET", "/api/v1/usage", disabledKey, ""))
	c.do(apiRequest("POST", "/api/v1/usage", key, good))

	// Generations, plain and as events, then every client error.
	resp, _ := c.do(apiRequest("POST", gen, key, good))
	rid := resp.Header.Get("X-Request-Id")
	c.do(apiRequest("POST", gen, key, good, "Accept", "text/event-stream"))
	long := genBody("summarizer", strings.Repeat("ü", 101), "en", "")
	for _, r := range []*http.Request{
		apiRequest("GET", gen, key, ""),
		apiRequest("POST", gen, "", good),
		apiRequest("POST", gen, "tg_live_nonsense", good, "Authorization", "Bearer "+key),
		apiRequest("POST", gen, disabledKey, good),
		apiRequest("POST", gen, brokeKey, good),
		apiRequest("POST", gen, cappedKey, good),
		apiRequest("POST", gen, cappedKey, good),
		apiRequest("POST", gen, key, good, "Content-Type", "text/plain"),
		apiRequest("POST", gen, key, "{nope"),
		apiRequest("POST", gen, key, `{"tool":"summarizer","input":"x"}`),
		apiRequest("POST", gen, key, `{"tool":"summarizer","input":7,"language":"en"}`),
		apiRequest("POST", gen, key, `{"tool":"summarizer","input":"x","language":"en","model":"big"}`),
		apiRequest("POST", gen, key, genBody("summarizer", " \t ", "en", "")),
		apiRequest("POST", gen, key, "{\"tool\":\"summarizer\",\"input\":\"\xc3\x28\",\"language\":\"en\"}"),
		apiRequest("POST", gen, key, genBody("poem-writer", "x", "en", "")),
		apiRequest("POST", gen, key, genBody("summarizer", "x", "xx", "")),
		apiRequest("POST", gen, key, genBody("summarizer", "x", "en", "angry")),
		apiRequest("POST", gen, key, long),
		apiRequest("POST", gen, key, genBody("summarizer", strings.Repeat("a", 3000), "en", "")),
		apiRequest("POST", gen, key, good, "Idempotency-Key", strings.Repeat("k", 256)),
		// The model server busy, and answering with an error.
		apiRequest("POST", gen, key, genBody("cv-generator", "x", "en", "")),
		apiRequest("POST", gen, key, genBody("meeting-agenda", "x", "en", "")),
	} {
		c.do(r)
	}
	c.check(apiRequest("POST", gen, key, good), slowBody(t, key))

	// Idempotency: another body, then a replay of the kept text (plain and as events).
	c.do(apiRequest("POST", gen, key, good, "Idempotency-Key", "conf-1"))
	c.do(apiRequest("POST", gen, key, genBody("summarizer", "y", "en", ""), "Idempotency-Key", "conf-1"))
	if resp, _ := c.do(apiRequest("POST", gen, key, good, "Idempotency-Key", "conf-1")); resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the retry was not a replay: %v", resp.Header)
	}
	c.do(apiRequest("POST", gen, key, good, "Idempotency-Key", "conf-1", "Accept", "text/event-stream"))

	// Chat completions (chat.go): whole, streamed (with usage, with every field the door reads
	// and some it ignores), a model that breaks after text (the stream's error event; whole,
	// 502), then every refusal; the models.
	resp, body := c.do(apiRequest("POST", cc, key, goodChat))
	if id := resp.Header.Get("X-Request-Id"); !bytes.Contains(body, []byte(`"id":"`+id+`"`)) {
		t.Errorf("the completion's id is not its X-Request-Id %s: %s", id, body)
	}
	streamChat := chatBody("summarizer", "x", `"stream":true,"stream_options":{"include_usage":true}`)
	if _, body := c.do(apiRequest("POST", cc, key, streamChat)); !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) ||
		!bytes.Contains(body, []byte(`"choices":[],"usage":{`)) {
		t.Errorf("the stream does not end with its usage chunk and [DONE]: %s", body)
	}
	c.do(apiRequest("POST", cc, key, chatBody("summarizer", "x", `"stream":true,"language":"de","tone":"formal",`+
		`"max_completion_tokens":3,"max_tokens":9,"temperature":0.5,"n":1,"tools":[],"tool_choice":null,`+
		`"functions":null,"response_format":{"type":"json_object"},"user":"u1","store":false,"seed":3`)))
	c.do(apiRequest("POST", cc, key, `{"model":"summarizer","messages":[{"role":"user","content":[{"type":"text","text":"a"},`+
		`{"type":"text","text":"b"}]}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}}`))
	if _, body := c.do(apiRequest("POST", cc, key, chatBody("bug-report", "x", `"stream":true`))); bytes.Contains(body, []byte("[DONE]")) ||
		!bytes.Contains(body, []byte("tok ")) || !bytes.HasPrefix(body[bytes.LastIndex(body, []byte("data: ")):], []byte(`data: {"error":{`)) {
		t.Errorf("the broken stream does not end with its error event: %s", body)
	}
	for _, r := range []*http.Request{
		apiRequest("POST", cc, key, chatBody("bug-report", "x", "")),
		apiRequest("GET", cc, key, ""),
		apiRequest("POST", cc, "", goodChat),
		apiRequest("POST", cc, "tg_live_nonsense", goodChat, "Authorization", "Bearer "+key),
		apiRequest("POST", cc, disabledKey, goodChat),
		apiRequest("POST", cc, brokeKey, goodChat),
		apiRequest("POST", cc, cappedKey, goodChat),
		apiRequest("POST", cc, key, goodChat, "Content-Type", "text/plain"),
		apiRequest("POST", cc, key, "{nope"),
		apiRequest("POST", cc, key, " "),
		apiRequest("POST", cc, key, goodChat+"{}"),
		apiRequest("POST", cc, key, "[]"),
		apiRequest("POST", cc, key, `{"messages":[{"role":"user","content":"x"}]}`),
		apiRequest("POST", cc, key, `{"model":"summarizer","messages":[]}`),
		apiRequest("POST", cc, key, `{"model":7,"messages":[{"role":"user","content":"x"}]}`),
		apiRequest("POST", cc, key, chatBody("summarizer", "x", `"stream_options":{"include_usage":"yes"}`)),
		apiRequest("POST", cc, key, `{"model":"summarizer","messages":"x"}`),
		apiRequest("POST", cc, key, `{"model":"summarizer","messages":[{"role":"user","content":7}]}`),
		apiRequest("POST", cc, key, chatBody("summarizer", "x", `"max_tokens":0`)),
		apiRequest("POST", cc, key, chatBody("summarizer", "x", `"temperature":2.5`)),
		apiRequest("POST", cc, key, chatBody("summarizer", "x", `"response_format":{"type":"xml"}`)),
		apiRequest("POST", cc, key, chatBody("summarizer", "x", `"response_format":{"type":"json_schema","json_schema":{"name":"x"}}`)),
		apiRequest("POST", cc, key, chatBody("summarizer", "a\x07b", "")),
		apiRequest("POST", cc, key, chatBody("summarizer", "x", `"tools":[{"type":"function","function":{"name":"f"}}]`)),
		apiRequest("POST", cc, key, chatBody("summarizer", "x", `"tool_choice":"none"`)),
		apiRequest("POST", cc, key, chatBody("summarizer", "x", `"n":2`)),
		apiRequest("POST", cc, key, `{"model":"summarizer","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"x"}]}`),
		apiRequest("POST", cc, key, `{"model":"summarizer","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}`),
		apiRequest("POST", cc, key, `{"model":"summarizer","messages":[{"role":"user","content":"x"},{"role":"user","content":"y"}]}`),
		apiRequest("POST", cc, key, `{"model":"summarizer","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`),
		apiRequest("POST", cc, key, chatBody("summarizer", " \t ", "")),
		apiRequest("POST", cc, key, "{\"model\":\"summarizer\",\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}"),
		apiRequest("POST", cc, key, chatBody("summarizer", "x", `"language":"xx"`)),
		apiRequest("POST", cc, key, chatBody("summarizer", "x", `"tone":"angry"`)),
		apiRequest("POST", cc, key, chatBody("poem-writer", "x", "")),
		apiRequest("POST", cc, key, chatBody("summarizer", strings.Repeat("ü", 101), "")),
		apiRequest("POST", cc, key, chatBody("summarizer", strings.Repeat("a", 3000), "")),
		apiRequest("POST", cc, key, goodChat, "Idempotency-Key", strings.Repeat("k", 256)),
		apiRequest("POST", cc, key, chatBody("cv-generator", "x", "")),
		apiRequest("POST", cc, key, chatBody("meeting-agenda", "x", "")),
		apiRequest("POST", cc, key, chatBody("meeting-agenda", "x", `"stream":true`)),
		apiRequest("POST", "/api/v1/chat/nothing", key, goodChat),
		apiRequest("POST", cc+"/", key, goodChat),
		// The models.
		apiRequest("GET", models, key, ""),
		apiRequest("GET", models+"/summarizer", key, ""),
		apiRequest("GET", models+"/poem-writer", key, ""),
		apiRequest("POST", models, key, ""),
		apiRequest("POST", models+"/summarizer", key, ""),
		apiRequest("GET", models, "", ""),
		apiRequest("GET", models+"/summarizer", "", ""),
		apiRequest("GET", models, key, "", "Authorization", "Bearer "+otherKey),
		apiRequest("GET", models+"/summarizer", key, "", "Authorization", "Bearer "+otherKey),
		apiRequest("GET", models, disabledKey, ""),
		apiRequest("GET", models+"/summarizer", disabledKey, ""),
	} {
		c.do(r)
	}
	c.check(apiRequest("POST", cc, key, goodChat), slowBodyAt(t, cc, key))

	// Idempotency of chat completions: another body (422), then the kept text again, whole and
	// streamed, as the first completion (its id), with nothing charged.
	for i, b := range []string{goodChat, streamChat} {
		idem := fmt.Sprintf("conf-c1-%d", i)
		first, _ := c.do(apiRequest("POST", cc, key, b, "Idempotency-Key", idem))
		if i == 0 {
			c.do(apiRequest("POST", cc, key, chatBody("summarizer", "y", ""), "Idempotency-Key", idem))
		}
		id := first.Header.Get("X-Request-Id")
		resp, body := c.do(apiRequest("POST", cc, key, b, "Idempotency-Key", idem))
		if resp.Header.Get("Idempotent-Replayed") != "true" || resp.Header.Get("X-Credits-Used") != "0" ||
			!bytes.Contains(body, []byte(`"id":"`+id+`"`)) || !bytes.Contains(body, []byte("tok ")) {
			t.Errorf("the retry was not a replay of %s: %v %s", id, resp.Header, body)
		}
	}

	// Two generations that stall before their first piece (504 after first_piece_timeout): the
	// same Idempotency-Key while the first runs is 409, a third generation of the account 429.
	stall := genBody("email-writer", "x", "en", "")
	var wg sync.WaitGroup
	for i, idem := range []string{"conf-2", ""} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.do(apiRequest("POST", gen, key, stall, "Idempotency-Key", idem))
		}()
		waitFor(t, "the stalled generation", func() bool { return fs.InFlight() == int64(i+1) })
		if i == 0 {
			c.do(apiRequest("POST", gen, key, stall, "Idempotency-Key", "conf-2"))
		}
	}
	c.do(apiRequest("POST", gen, key, good))
	wg.Wait()

	// The same for chat completions, of an account of their own: a stream that stalls gets
	// keep-alives, then its error event (sse_keepalive 5s, first_piece_timeout 10s); the same
	// Idempotency-Key while it runs is 409, a whole completion that stalls 504, a third
	// completion of the account 429.
	waitFor(t, "the stalled generations to end", func() bool { return fs.InFlight() == 0 })
	_, stallKey := e.account(5)
	stallStream := chatBody("email-writer", "x", `"stream":true`)
	for i, r := range []*http.Request{
		apiRequest("POST", cc, stallKey, stallStream, "Idempotency-Key", "conf-c2"),
		apiRequest("POST", cc, stallKey, chatBody("email-writer", "x", "")),
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, body := c.do(r); i == 0 && (resp.StatusCode != http.StatusOK || !bytes.HasPrefix(body, []byte(": keep-alive")) ||
				!bytes.Contains(body, []byte(`data: {"error":{`)) || bytes.Contains(body, []byte("[DONE]"))) {
				t.Errorf("the stalled stream did not end with its error event after keep-alives: %d %s", resp.StatusCode, body)
			}
		}()
		waitFor(t, "the stalled completion", func() bool { return fs.InFlight() == int64(i+1) })
		if i == 0 {
			c.do(apiRequest("POST", cc, stallKey, stallStream, "Idempotency-Key", "conf-c2"))
		}
	}
	c.do(apiRequest("POST", cc, stallKey, goodChat))
	wg.Wait()

	// A kept generation: its receipt, its text, resumed, and the wrong ways to ask.
	g := "/api/v1/generations/" + rid
	for _, r := range []*http.Request{
		apiRequest("GET", g, key, ""),
		apiRequest("GET", g, key, "", "Accept", "text/plain"),
		apiRequest("GET", g, key, "", "Accept", "text/plain", "Range", "bytes=3-"),
		apiRequest("GET", g, key, "", "Accept", "text/plain", "Range", "bytes=999-"),
		apiRequest("GET", g, key, "", "Accept", "text/event-stream"),
		apiRequest("GET", g, key, "", "Accept", "text/event-stream", "Last-Event-ID", "2"),
		apiRequest("GET", g, key, "", "Accept", "text/event-stream", "Last-Event-ID", "x"),
		apiRequest("GET", g, key, "", "Accept", "text/event-stream", "Last-Event-ID", "99"),
		apiRequest("GET", g, otherKey, ""),
		apiRequest("GET", g, "", ""),
		apiRequest("GET", g, key, "", "Authorization", "Bearer "+otherKey),
		apiRequest("GET", g, disabledKey, ""),
		// Its signed receipt and the keys that verify it (receipts.go).
		apiRequest("GET", g+"/receipt", key, ""),
		apiRequest("GET", g+"/receipt", otherKey, ""),
		apiRequest("POST", g+"/receipt", key, ""),
		apiRequest("GET", "/.well-known/textgen-receipt-keys", "", ""),
		apiRequest("POST", "/.well-known/textgen-receipt-keys", "", ""),
	} {
		c.do(r)
	}

	// Keys with limits (keylimits.go): a tool and an address the key may not use, a spent
	// budget (and the balance that shows it), an expired key (which counts as one failed
	// authentication of this address: the lockout below has room for it).
	_, toolKey := e.limitedKey(5, ledger.KeyLimits{AllowedTools: []string{"email-writer"}})
	_, addrKey := e.limitedKey(5, ledger.KeyLimits{AllowedCIDRs: []string{"192.0.2.0/24"}})
	_, budgetKey := e.limitedKey(5, ledger.KeyLimits{BudgetDay: 1, BudgetMonth: 10, BudgetTotal: 20})
	_, expKey := e.expiredKey(t, 5)
	for _, r := range []*http.Request{
		apiRequest("POST", gen, toolKey, good),
		apiRequest("POST", gen, addrKey, good),
		apiRequest("POST", gen, budgetKey, good),
		apiRequest("POST", gen, budgetKey, good),
		apiRequest("GET", "/api/v1/balance", budgetKey, ""),
		apiRequest("POST", gen, expKey, good),
		apiRequest("POST", cc, toolKey, goodChat),
		apiRequest("POST", cc, addrKey, goodChat),
		apiRequest("POST", cc, budgetKey, goodChat),
		apiRequest("GET", models, toolKey, ""),
		apiRequest("GET", models+"/summarizer", toolKey, ""),
		apiRequest("GET", models+"/summarizer", addrKey, ""),
	} {
		c.do(r)
	}

	// Redeeming a code (redeem.go): credited, again (409), a code that cannot be redeemed (one
	// failed authentication of this address: the lockout below has room for it), a test key,
	// then the body's refusals.
	code, _, err := e.store.CreateCode(ctx, ledger.NewCode{Credits: 5})
	if err != nil {
		t.Fatal(err)
	}
	redeemAcct, redeemKey := e.account(0)
	redeemTestKey, _, err := e.store.CreateKey(ctx, redeemAcct.ID, ledger.Test, "test", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	const redeem = "/api/v1/credits/redeem"
	if resp, body := c.do(apiRequest("POST", redeem, redeemKey, `{"code":"`+code+`"}`)); resp.StatusCode != http.StatusOK ||
		!bytes.Contains(body, []byte(`"credits":5`)) || resp.Header.Get("X-Credits-Remaining") != "5" {
		t.Errorf("redeem: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	for _, r := range []*http.Request{
		apiRequest("POST", redeem, redeemKey, `{"code":"`+strings.ToLower(code)+`"}`),
		apiRequest("POST", redeem, redeemKey, `{"code":"`+ledger.MakeCode()+`"}`),
		apiRequest("POST", redeem, redeemTestKey, `{"code":"`+code+`"}`),
		apiRequest("POST", redeem, disabledKey, `{"code":"`+code+`"}`),
		apiRequest("GET", redeem, redeemKey, ""),
		apiRequest("POST", redeem, "", `{"code":"`+code+`"}`),
		apiRequest("POST", redeem, redeemKey, `{"code":"`+code+`","credits":9}`),
		apiRequest("POST", redeem, redeemKey, `{"code":7}`),
		apiRequest("POST", redeem, redeemKey, `{}`),
		apiRequest("POST", redeem, redeemKey, `[`),
		apiRequest("POST", redeem, redeemKey, `{"code":"`+strings.Repeat("x", 2000)+`"}`),
		apiRequest("POST", redeem, redeemKey, `{"code":"x"}`, "Content-Type", "text/plain"),
	} {
		c.do(r)
	}

	// Last, as it locks this address out: failed authentications past auth_failure_limit.
	for _, p := range []string{"/api/v1/balance", g, "/api/v1/balance", g, "/api/v1/balance", g} {
		c.do(apiRequest("GET", p, "tg_live_nonsense", ""))
	}
	c.do(apiRequest("POST", gen, "tg_live_nonsense", good))
	c.do(apiRequest("POST", cc, "tg_live_nonsense", goodChat))
	c.do(apiRequest("GET", models, "tg_live_nonsense", ""))
	c.do(apiRequest("GET", models+"/summarizer", "tg_live_nonsense", ""))
	if resp, _ := c.do(apiRequest("POST", redeem, redeemKey, `{"code":"`+code+`"}`)); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("redeem from a locked-out address: %d, want 429", resp.StatusCode)
	}

	// A model server that is down; a test key with retention off, whose retry gets the JSON
	// replay. (The config is replaced: the old one's connections go.)
	e2 := newEnv(t, envOptions{ollama: deadURL(t), extra: "retention off"})
	e.client.CloseIdleConnections()
	c.client = e2.client
	acct2, key2 := e2.account(3)
	c.do(apiRequest("POST", gen, key2, good))
	c.do(apiRequest("POST", cc, key2, goodChat))
	// The OpenAI paths' failed authentications, here where no lockout follows.
	_, expKey2 := e2.expiredKey(t, 1)
	for _, k := range []string{"tg_live_nonsense", expKey2} {
		c.do(apiRequest("POST", cc, k, goodChat))
		c.do(apiRequest("GET", models, k, ""))
		c.do(apiRequest("GET", models+"/summarizer", k, ""))
	}
	waitFor(t, "not ready", func() bool {
		resp := e2.get("/api/v1/ready", "")
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	c.do(apiRequest("GET", "/api/v1/ready", "", ""))
	testKey, _, err := e2.store.CreateKey(ctx, acct2.ID, ledger.Test, "test", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	e2.grant(acct2.ID, ledger.Test, 3)
	c.do(apiRequest("POST", gen, testKey, good, "Idempotency-Key", "conf-3"))
	if _, body := c.do(apiRequest("POST", gen, testKey, good, "Idempotency-Key", "conf-3")); !bytes.Contains(body, []byte(`"idempotent_replay":true`)) {
		t.Errorf("the retry got %s, want the JSON replay", body)
	}
	// A chat completion's retry without kept text: 409 idempotent_replay, which the SDKs must not
	// retry.
	c.do(apiRequest("POST", cc, testKey, goodChat, "Idempotency-Key", "conf-c3"))
	if resp, _ := c.do(apiRequest("POST", cc, testKey, goodChat, "Idempotency-Key", "conf-c3")); resp.StatusCode != http.StatusConflict ||
		resp.Header.Get("X-Should-Retry") != "false" || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the chat retry got %d %v, want 409 idempotent_replay", resp.StatusCode, resp.Header)
	}

	var missing []string
	for pair := range c.documentedPairs() {
		if !c.seen[pair] && notProvoked[pair] == "" {
			missing = append(missing, pair)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("documented but not provoked: %v (provoke them here, or say in notProvoked where they are)", missing)
	}
	for pair := range notProvoked {
		if !c.documentedPairs()[pair] {
			t.Errorf("notProvoked names %s, which the document does not have", pair)
		}
	}
	// The OpenAI-compatible operations share most codes with generate, so a pair seen there says
	// nothing of them: each of their own answers must be provoked.
	missing = nil
	for op := range c.documentedOps("openai") {
		f := strings.Fields(op) // method, path, status, code or content type
		if !c.seenOp[op] && notProvoked[f[2]+" "+f[3]] == "" && notProvokedOp[op] == "" {
			missing = append(missing, op)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("documented but not provoked on the OpenAI-compatible paths: %q", missing)
	}
	for op := range notProvokedOp {
		if !c.documentedOps("openai")[op] {
			t.Errorf("notProvokedOp names %s, which the document does not have", op)
		}
	}
}

// TestOpenAPIErrorCodes: the document's ErrorCode lists exactly the codes the handler's source
// answers with, so a new code cannot go undocumented; every answer's codes are among them, and
// the example of every error in OpenAI's shape has the type the server gives its status.
func TestOpenAPIErrorCodes(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?:newError\(http\.\w+, |Code: +)"([a-z0-9_]+)"`)
	inSource := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			inSource[string(m[1])] = true
		}
	}
	c := newConformance(t, nil)
	documented := map[string]bool{}
	var known []string
	if err := c.model.Components.Schemas.GetOrZero("ErrorCode").Schema().Extensions.GetOrZero("x-known-values").Decode(&known); err != nil {
		t.Fatalf("ErrorCode's x-known-values: %v", err)
	}
	for _, code := range known {
		documented[code] = true
	}
	if len(inSource) < 20 {
		t.Fatalf("found only %d codes in the source: is the pattern stale?", len(inSource))
	}
	for code := range inSource {
		if !documented[code] {
			t.Errorf("the handler answers with %q, which ErrorCode in docs/openapi.json does not list", code)
		}
	}
	for code := range documented {
		if !inSource[code] {
			t.Errorf("docs/openapi.json lists %q, which the handler never answers with", code)
		}
	}
	openAI := 0
	for path, item := range c.model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for status, resp := range op.Responses.Codes.FromOldest() {
				where := method + " " + path + " " + status
				for _, code := range errorCodes(resp) {
					if !documented[code] {
						t.Errorf("%s: x-error-codes has %q, which ErrorCode's x-known-values lacks", where, code)
					}
				}
				mt := resp.Content.GetOrZero("application/json")
				if mt == nil || mt.Schema == nil || mt.Schema.GetReference() != "#/components/schemas/OpenAIErrorBody" {
					continue
				}
				openAI++
				var ex struct {
					Error struct {
						Type string `yaml:"type"`
						Code string `yaml:"code"`
					} `yaml:"error"`
				}
				n, _ := strconv.Atoi(status)
				if mt.Example == nil || mt.Example.Decode(&ex) != nil {
					t.Errorf("%s: no example error", where)
				} else if want := openAIErrorType(n); ex.Error.Type != want || !slices.Contains(errorCodes(resp), ex.Error.Code) {
					t.Errorf("%s: the example is of type %q, code %q; the server answers type %q, codes %v", where, ex.Error.Type,
						ex.Error.Code, want, errorCodes(resp))
				}
			}
		}
	}
	if openAI < 20 {
		t.Errorf("only %d answers of the document are OpenAI's errors", openAI)
	}
}
