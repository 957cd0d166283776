package caddymodule

// The API document (docs/openapi.json) against the real server: every answer the tests below
// provoke must validate against it (status, content type, required headers, JSON body, SSE
// events), and every (status, error code) pair it documents must be provoked.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	"503 ledger_unavailable": "needs a full disk under the ledger: TestServerOnFullDisk provokes it in a Caddy " +
		"process of its own and checks it against the document",
}

// conformance checks answers against the API document and notes the error pairs it saw.
type conformance struct {
	t      *testing.T
	client *http.Client
	v      validator.Validator
	model  *v3.Document
	sv     schema_validation.SchemaValidator
	events map[string]*base.Schema // SSE event name -> the schema of its data

	mu   sync.Mutex
	seen map[string]bool // "402 insufficient_credits"
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
		events: map[string]*base.Schema{}, seen: map[string]bool{}}
	// The events of a text/event-stream answer are named in EventStream's x-events.
	var raw struct {
		Components struct {
			Schemas struct {
				EventStream struct {
					Events map[string]struct {
						Ref string `json:"$ref"`
					} `json:"x-events"`
				}
			}
		}
	}
	if err := json.Unmarshal(docs.OpenAPI, &raw); err != nil {
		t.Fatal(err)
	}
	for name, ev := range raw.Components.Schemas.EventStream.Events {
		sp := model.Model.Components.Schemas.GetOrZero(strings.TrimPrefix(ev.Ref, "#/components/schemas/"))
		if sp == nil {
			t.Fatalf("x-events %s: no schema %s", name, ev.Ref)
		}
		c.events[name] = sp.Schema()
	}
	return c
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
	if resp.StatusCode == http.StatusNotFound && !strings.HasPrefix(req.URL.Path, generationsPath) {
		// A path the API does not have: its 404 is the one the document states for unknown
		// generations (the description says so for every other path).
		vreq = req.Clone(context.Background())
		vreq.Method, vreq.URL.Path = http.MethodGet, generationsPath+"req_0"
	}
	if resp.StatusCode == http.StatusMethodNotAllowed {
		// OpenAPI cannot describe a method a path does not have: the 405 answer is checked
		// against the 405 response of the path's own operation.
		vreq = req.Clone(context.Background())
		vreq.Method = http.MethodGet
		if req.URL.Path == "/api/v1/generate" {
			vreq.Method = http.MethodPost
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
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		c.checkEvents(what, body)
	case strings.HasPrefix(ct, "application/json") && resp.StatusCode >= 400:
		var b apiErrBody
		if err := json.Unmarshal(body, &b); err == nil && b.Error.Code != "" {
			if codes := c.codesOf(vreq, resp.StatusCode); !slices.Contains(codes, b.Error.Code) {
				c.t.Errorf("%s: code %q is not among the answer's x-error-codes %v", what, b.Error.Code, codes)
			}
			c.mu.Lock()
			c.seen[strconv.Itoa(resp.StatusCode)+" "+b.Error.Code] = true
			c.mu.Unlock()
		}
	}
	return body
}

// checkEvents checks every event of an SSE body against the schema of its name.
func (c *conformance) checkEvents(what string, body []byte) {
	c.t.Helper()
	evs, err := readSSE(bytes.NewReader(body))
	if err != nil || len(evs) == 0 {
		c.t.Errorf("%s: no events (%v): %q", what, err, body)
	}
	for _, ev := range evs {
		s := c.events[ev.name]
		if s == nil {
			c.t.Errorf("%s: event %q is not documented", what, ev.name)
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
	var doc map[string]any
	if err := json.Unmarshal(docs.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var closeObjects func(v any)
	closeObjects = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, has := v["properties"]; has {
				if _, set := v["additionalProperties"]; !set {
					v["additionalProperties"] = false
				}
			}
			for _, sub := range v {
				closeObjects(sub)
			}
		case []any:
			for _, sub := range v {
				closeObjects(sub)
			}
		}
	}
	closeObjects(doc["components"].(map[string]any)["schemas"])
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
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
	e := newEnv(t, envOptions{ollama: fs.URL, firstPiece: "10s", // the stalls below end by it
		site: receiptsSite, matcher: "@textgen",
		limits: "rate_limit key 1000000/1m\n\t\trate_limit account 1000000/1m\n\t\tauth_failure_limit 3/1h\n\t\t" +
			"max_concurrent_per_account 2\n\t\tmax_in_flight 1000\n\t\tqueue_size 1000\n\t\tbody_read_timeout 1s",
		extra: "retention_key " + testRetentionKey + "\n\t\tmax_input_chars 100\n\t\tmax_body_size 2KiB\n\t\t" +
			"tool email-writer {\n\t\t\tmodel stall\n\t\t}\n\t\ttool cv-generator {\n\t\t\tmodel busy\n\t\t}\n\t\t" +
			"tool meeting-agenda {\n\t\t\tmodel broken\n\t\t}"})
	c := newConformance(t, e.client)
	ctx := context.Background()
	_, key := e.account(20)
	_, brokeKey := e.account(0)
	_, cappedKey, _ := e.cappedMember(5)
	_, disabledKey := e.disabledAccount(5)
	_, otherKey := e.account(1)
	const gen = "/api/v1/generate"
	good := genBody("summarizer", "x", "en", "")

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
	} {
		c.do(r)
	}

	// Last, as it locks this address out: failed authentications past auth_failure_limit.
	for _, p := range []string{"/api/v1/balance", g, "/api/v1/balance", g, "/api/v1/balance", g} {
		c.do(apiRequest("GET", p, "tg_live_nonsense", ""))
	}
	c.do(apiRequest("POST", gen, "tg_live_nonsense", good))

	// A model server that is down; a test key with retention off, whose retry gets the JSON
	// replay. (The config is replaced: the old one's connections go.)
	e2 := newEnv(t, envOptions{ollama: deadURL(t), extra: "retention off"})
	e.client.CloseIdleConnections()
	c.client = e2.client
	acct2, key2 := e2.account(3)
	c.do(apiRequest("POST", gen, key2, good))
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
}

// TestOpenAPIErrorCodes: the document's ErrorCode lists exactly the codes the handler's source
// answers with, so a new code cannot go undocumented.
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
}
