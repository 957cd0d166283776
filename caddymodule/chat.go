package caddymodule

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/pipeline"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/jsonenc"
)

// OpenAI's chat completions as a door to the tools (door.go): the OpenAI SDKs, pointed at
// <site>/api/v1, call a tool as a model. The user's message is the tool's input; the tool's
// own instructions, in the language and tone the body names, stay the system prompt. One
// completion is one generation: held, charged and kept as on POST /api/v1/generate.

const chatCompletionsPath = "/api/v1/chat/completions"

// chatDoor is POST /api/v1/chat/completions.
type chatDoor struct{}

// chatAsk is what a chat completion asks beyond a generate request.
type chatAsk struct {
	includeUsage bool  // stream_options.include_usage
	created      int64 // the completion's created (Unix seconds)
	// maxTokens is max_completion_tokens (or max_tokens) within the tool's own; 0: the tool's.
	maxTokens   int
	temperature *float64
	format      *backends.Format
}

// chatRequest is the part of OpenAI's chat completion request the door reads; the many other
// fields SDKs send are accepted and ignored.
type chatRequest struct {
	Model         *string         `json:"model"`
	Messages      json.RawMessage `json:"messages"`
	Stream        *bool           `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	N                   *int            `json:"n"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	Functions           json.RawMessage `json:"functions"`
	FunctionCall        json.RawMessage `json:"function_call"`
	ResponseFormat      json.RawMessage `json:"response_format"`
	// Language and tone are this API's own: SDKs send extra fields as given.
	Language *string `json:"language"`
	Tone     *string `json:"tone"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

func (chatDoor) read(h *Handler, w http.ResponseWriter, r *http.Request, a *ask) *apiError {
	buf, e := h.readJSONBody(w, r)
	if e != nil {
		return e
	}
	defer bodyPool.Put(buf)
	body := buf.Bytes()
	if !utf8.Valid(body) || loneSurrogate(body) {
		return newError(http.StatusBadRequest, "invalid_utf8", "messages", "the request body is not valid UTF-8 text")
	}
	var cr chatRequest
	if e := decodeChat(body, &cr); e != nil {
		return e
	}
	a.chat = &chatAsk{created: now().Unix()}
	if e := cr.read(h, a); e != nil {
		return e
	}
	if a.idem = r.Header.Get("Idempotency-Key"); a.idem != "" {
		sum := sha256.Sum256(body)
		a.fingerprint = hex.EncodeToString(sum[:])
	}
	return nil
}

// decodeChat decodes one JSON object into cr, naming a field of the wrong type.
func decodeChat(body []byte, cr *chatRequest) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(cr); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			return newError(http.StatusBadRequest, "invalid_json", "", "the request body must be a JSON object")
		}
		if errors.As(err, &te) {
			return newError(http.StatusBadRequest, "invalid_field", te.Field, fmt.Sprintf("field %q has the wrong type (%s where %s is expected)", te.Field, te.Value, te.Type))
		}
		if len(bytes.TrimSpace(body)) == 0 {
			return newError(http.StatusBadRequest, "invalid_json", "", "the request body is empty; send a JSON object with model and messages")
		}
		return invalidJSON(err)
	}
	if dec.More() {
		return newError(http.StatusBadRequest, "invalid_json", "", "unexpected data after the JSON object")
	}
	return nil
}

// read checks cr's fields and fills in a: the tool (model), its input (the user's message), the
// language and tone, and what the chat asks beyond them.
func (cr *chatRequest) read(h *Handler, a *ask) *apiError {
	if cr.Model == nil || *cr.Model == "" {
		return newError(http.StatusBadRequest, "missing_field", "model", "field \"model\" is required: a tool's slug, as GET /api/v1/models lists them")
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"tools", cr.Tools}, {"tool_choice", cr.ToolChoice}, {"functions", cr.Functions}, {"function_call", cr.FunctionCall}} {
		if present(f.raw) {
			return newError(http.StatusBadRequest, "unsupported_field", f.name,
				fmt.Sprintf("%q is not supported: each model of this API is a tool that answers its input with text", f.name))
		}
	}
	if cr.N != nil && *cr.N != 1 {
		return newError(http.StatusBadRequest, "unsupported_field", "n", "n must be 1: one completion is generated (and charged) per request")
	}
	input, e := chatInput(cr.Messages)
	if e != nil {
		return e
	}
	c := a.chat
	if cr.Stream != nil && *cr.Stream {
		a.sse = true
		c.includeUsage = cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage != nil && *cr.StreamOptions.IncludeUsage
	}
	if e := c.readLimits(cr); e != nil {
		return e
	}
	if c.format, e = readFormat(cr.ResponseFormat); e != nil {
		return e
	}
	a.req = genRequest{Tool: *cr.Model, Input: input, Language: h.DefaultLanguage, seen: fieldTool | fieldInput | fieldLanguage}
	if cr.Language != nil {
		a.req.Language = *cr.Language
	}
	if cr.Tone != nil {
		a.req.Tone, a.req.seen = *cr.Tone, a.req.seen|fieldTone
	}
	a.tool, a.lang, e = h.validate(&a.req)
	if e != nil && e.Code == "unknown_tool" {
		return newError(http.StatusNotFound, "model_not_found", "model",
			fmt.Sprintf("the model %q does not exist: the models are this API's %d tools (GET /api/v1/models)", truncate(*cr.Model, 64), len(h.tools)))
	}
	return e
}

// readLimits reads max_completion_tokens (or the older max_tokens) and temperature.
func (c *chatAsk) readLimits(cr *chatRequest) *apiError {
	name, n := "max_tokens", cr.MaxTokens
	if cr.MaxCompletionTokens != nil {
		name, n = "max_completion_tokens", cr.MaxCompletionTokens
	}
	if n != nil {
		if *n < 1 {
			return newError(http.StatusBadRequest, "invalid_field", name, name+" must be at least 1")
		}
		c.maxTokens = *n
	}
	if t := cr.Temperature; t != nil {
		if *t < 0 || *t > 2 {
			return newError(http.StatusBadRequest, "invalid_field", "temperature", "temperature must be between 0 and 2")
		}
		c.temperature = t
	}
	return nil
}

// present: a field sent with a value (null and an empty list are as good as absent).
func present(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != "[]"
}

// chatInput is the tool's input: the one user message's text (an array's text parts joined by
// newlines). A system or developer message would replace the tool's instructions, and a tool
// answers one message: both are refused, as is any part but text.
func chatInput(raw json.RawMessage) (string, *apiError) {
	var msgs []chatMessage
	if !present(raw) {
		return "", newError(http.StatusBadRequest, "missing_field", "messages", "field \"messages\" is required: one message with role user, whose content is the tool's input")
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return "", newError(http.StatusBadRequest, "invalid_field", "messages", "messages must be a list of messages with role and content")
	}
	input, users := "", 0
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "user":
		case "system", "developer":
			return "", newError(http.StatusBadRequest, "unsupported_field", param+".role",
				"a "+m.Role+" message would replace the tool's own instructions; send the input as one user message (language and tone are fields of the body)")
		default:
			return "", newError(http.StatusBadRequest, "unsupported_field", param+".role",
				fmt.Sprintf("a message with role %q is not supported: each tool answers one user message", truncate(m.Role, 32)))
		}
		if users++; users > 1 {
			return "", newError(http.StatusBadRequest, "unsupported_field", param,
				"each tool answers one user message; send the whole input in one")
		}
		var e *apiError
		if input, e = messageText(m.Content, param+".content"); e != nil {
			return "", e
		}
	}
	if users == 0 {
		return "", newError(http.StatusBadRequest, "missing_field", "messages", "no user message: its content is the tool's input")
	}
	return input, nil
}

// messageText is a message's content: a string, or the text of its parts.
func messageText(raw json.RawMessage, param string) (string, *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []chatPart
	if err := json.Unmarshal(raw, &parts); err != nil || len(parts) == 0 {
		return "", newError(http.StatusBadRequest, "invalid_field", param, "a message's content must be a string or a list of text parts")
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", newError(http.StatusBadRequest, "unsupported_field", fmt.Sprintf("%s[%d].type", param, j),
				fmt.Sprintf("a content part of type %q is not supported: the tools read text parts only", truncate(p.Type, 32)))
		}
		texts = append(texts, *p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// readFormat reads response_format: text (nil), json_object, or json_schema with its schema.
func readFormat(raw json.RawMessage) (*backends.Format, *apiError) {
	if !present(raw) {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, newError(http.StatusBadRequest, "invalid_field", "response_format", "response_format must be an object with a type")
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &backends.Format{}, nil
	case "json_schema":
		if rf.JSONSchema == nil || !present(rf.JSONSchema.Schema) || rf.JSONSchema.Schema[0] != '{' {
			return nil, newError(http.StatusBadRequest, "invalid_field", "response_format.json_schema.schema", "a json_schema response_format needs json_schema.schema, a JSON schema object")
		}
		return &backends.Format{Schema: rf.JSONSchema.Schema, Name: rf.JSONSchema.Name, Strict: rf.JSONSchema.Strict}, nil
	}
	return nil, newError(http.StatusBadRequest, "invalid_field", "response_format.type",
		fmt.Sprintf("response_format type %q is not supported; use text, json_object or json_schema", truncate(rf.Type, 32)))
}

// errFormatNotTaken: the model servers of the tool cannot constrain an answer to JSON.
var errFormatNotTaken = newError(http.StatusBadRequest, "unsupported_field", "response_format",
	"the model server of this tool cannot constrain its answer to JSON; leave response_format out")

// writeError answers e in OpenAI's shape, {"error": {"message", "type", "param", "code"}}, which
// the SDKs raise as the class of its status; the headers are those of every error answer.
func (chatDoor) writeError(w http.ResponseWriter, reqID string, e *apiError, remaining int64) {
	body, _ := json.Marshal(openAIErrorBody{Error: openAIError(e, reqID)})
	writeErrorBody(w, reqID, e, remaining, append(body, '\n'))
}

type openAIErrorBody struct {
	Error openAIErr `json:"error"`
}

// openAIErr is an error as OpenAI writes it, with this API's request_id and resets_at.
type openAIErr struct {
	Message  string  `json:"message"`
	Type     string  `json:"type"`
	Param    *string `json:"param"`
	Code     string  `json:"code"`
	ResetsAt string  `json:"resets_at,omitempty"`
	// CreditsRequired: the tool's price, with insufficient_credits.
	CreditsRequired int64  `json:"credits_required,omitempty"`
	RequestID       string `json:"request_id"`
}

func openAIError(e *apiError, reqID string) openAIErr {
	oe := openAIErr{Message: e.Message, Type: openAIErrorType(e.Status), Code: e.Code, ResetsAt: e.ResetsAt, CreditsRequired: e.CreditsRequired, RequestID: reqID}
	if e.Param != "" {
		p := e.Param
		switch p { // a generate request's names for what the chat request calls otherwise
		case "tool":
			p = "model"
		case "input":
			p = "messages"
			if rest, ok := strings.CutPrefix(oe.Message, "input "); ok {
				oe.Message = "the user message " + rest
			}
		}
		oe.Param = &p
	}
	return oe
}

// openAIErrorType is the type OpenAI gives errors of status.
func openAIErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusPaymentRequired:
		return "insufficient_quota"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func (chatDoor) encoder(g *generation) encoder {
	c := g.ask.chat
	if !g.ask.sse {
		return &chatWhole{head: chatHead(g.id, "chat.completion", c.created, g.ask.tool.Slug)}
	}
	return &chatChunks{head: chatHead(g.id, "chat.completion.chunk", c.created, g.ask.tool.Slug), usage: c.includeUsage}
}

// chatHead is the start of a completion's or chunk's JSON, up to its choices.
func chatHead(id, object string, created int64, model string) []byte {
	b := append([]byte(`{"id":`), jsonenc.AppendString(nil, id)...)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":`...)
	b = jsonenc.AppendString(b, model)
	return append(b, `,"system_fingerprint":null,"choices":[`...)
}

// chatChunks is a streamed chat completion: a chat.completion.chunk event for every piece, a
// last one with the finish reason, with include_usage one with the usage, then [DONE]. A
// stream that breaks ends with an event of the error, which the SDKs raise.
type chatChunks struct {
	head  []byte
	usage bool
	role  bool // the first chunk, with the role, went out
}

func (*chatChunks) contentType() string { return "text/event-stream" }
func (*chatChunks) whole() bool         { return false }

func (c *chatChunks) piece(dst []byte, _ int, piece string) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, c.head...)
	dst = append(dst, `{"index":0,"delta":{`...)
	if !c.role {
		c.role = true
		dst = append(dst, `"role":"assistant",`...)
	}
	dst = append(dst, `"content":`...)
	dst = jsonenc.AppendString(dst, piece)
	return append(dst, "},\"logprobs\":null,\"finish_reason\":null}]}\n\n"...)
}

func (c *chatChunks) end(dst []byte, _ int, x ending) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, c.head...)
	dst = append(dst, `{"index":0,"delta":{},"logprobs":null,"finish_reason":"`...)
	dst = append(dst, x.finishReason...)
	dst = append(dst, "\"}]}\n\n"...)
	if c.usage {
		dst = append(dst, "data: "...)
		dst = append(dst, c.head...)
		dst = append(dst, "],"...)
		dst = appendUsage(dst, x)
		dst = append(dst, "}\n\n"...)
	}
	return append(dst, "data: [DONE]\n\n"...)
}

func (c *chatChunks) fail(dst []byte, _ int, e *apiError) []byte {
	body, _ := json.Marshal(openAIErrorBody{Error: openAIError(e, e.RequestID)})
	dst = append(dst, "data: "...)
	dst = append(dst, body...)
	return append(dst, "\n\n"...)
}

// chatWhole is a chat completion sent whole once the model is done.
type chatWhole struct{ head []byte }

func (*chatWhole) contentType() string                        { return "application/json" }
func (*chatWhole) whole() bool                                { return true }
func (*chatWhole) piece(dst []byte, _ int, _ string) []byte   { return dst }
func (*chatWhole) fail(dst []byte, _ int, _ *apiError) []byte { return dst }
func (c *chatWhole) end(dst []byte, _ int, x ending) []byte {
	dst = append(dst, c.head...)
	dst = append(dst, `{"index":0,"message":{"role":"assistant","content":`...)
	dst = jsonenc.AppendString(dst, x.text)
	dst = append(dst, `,"refusal":null},"logprobs":null,"finish_reason":"`...)
	dst = append(dst, x.finishReason...)
	dst = append(dst, `"}],`...)
	dst = appendUsage(dst, x)
	return append(dst, "}\n"...)
}

// replayKept answers a retried chat completion with the first one's kept text, whole or
// streamed as the first (the same body) asked, once that generation has ended complete; it answers
// nothing and returns false for one that ended otherwise (the caller goes on as without kept
// text). Nothing is charged: X-Credits-Used 0, Idempotent-Replayed true, and the completion's
// id is the first request's.
func (chatDoor) replayKept(g *generation, ctx context.Context, src keptSource, view keptView, rec ledger.IdempotencyRecord) bool {
	for !view.ended() {
		v, err := src.next(ctx, len(view.pieces))
		if err != nil {
			return false
		}
		view = v
	}
	if view.voided || view.rec.State != ledger.GenerationCompleted {
		return false
	}
	g.status, g.errKind = http.StatusOK, "idempotent_replay"
	x := ending{requestID: rec.RequestID, remaining: g.remaining, outputTokens: view.rec.OutputTokens,
		finishReason: pipeline.FinishReason(view.rec.FinishReason), text: strings.Join(view.pieces, "")}
	created := g.ask.chat.created
	if !view.rec.Created.IsZero() {
		created = view.rec.Created.Unix() // the first completion's
	}
	var enc encoder = &chatWhole{head: chatHead(rec.RequestID, "chat.completion", created, g.ask.tool.Slug)}
	var body []byte
	if g.ask.sse {
		enc = &chatChunks{head: chatHead(rec.RequestID, "chat.completion.chunk", created, g.ask.tool.Slug), usage: g.ask.chat.includeUsage}
		body = enc.piece(body, 0, x.text)
	}
	g.writeReplay(http.StatusOK, enc.contentType(), enc.end(body, 0, x))
	return true
}

// replay answers a retry whose first completion's text is not kept with an error: an SDK would
// read a 200 without a completion as an empty one. The error names the first request;
// X-Should-Retry: false keeps the SDKs from retrying it.
func (chatDoor) replay(g *generation, rec ledger.IdempotencyRecord) {
	g.w.Header().Set("X-Should-Retry", "false")
	g.w.Header().Set("Idempotent-Replayed", "true")
	e := newError(http.StatusConflict, "idempotent_replay", "Idempotency-Key",
		"a request with this Idempotency-Key was already completed and charged as "+rec.RequestID+
			"; its text is not kept on this server, so it cannot be sent again; nothing was charged now")
	g.status = e.Status
	g.door.writeError(g.w, g.id, e, g.remaining)
}

// appendUsage appends "usage": the prompt's and the answer's tokens as the model server counted
// them.
func appendUsage(dst []byte, x ending) []byte {
	dst = append(dst, `"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(x.promptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(x.outputTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	return append(strconv.AppendInt(dst, int64(x.promptTokens+x.outputTokens), 10), '}')
}
