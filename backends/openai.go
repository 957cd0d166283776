package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"
)

// The OpenAI-compatible wire: POST /v1/chat/completions with "stream": true, answered with
// server-sent events ("data: {chunk}" lines, "data: [DONE]" at the end). vLLM, llama.cpp's
// server, LM Studio, hosted services and Ollama itself speak it. Everything around the wire
// (hosts and failover, admission, the watchdog, typed errors, batching pieces into flushes) is
// the backend's own and the same for both wires (chat.go, attempt.go).

// openaiWire speaks the OpenAI-compatible API.
type openaiWire struct {
	key string // sent as a bearer token when set
}

// NewOpenAIWire is the wire of OpenAI-compatible servers (/v1/chat/completions with server-sent
// events: vLLM, llama.cpp's server, hosted services, and Ollama too). Its hosts are URLs with a
// scheme, the base URL an OpenAI client is given ("https://api.example.com/v1") or a server's
// address (to which /v1 is added); the health probe and the model check use GET /v1/models,
// and models cannot be pulled. apiKey, when set, is sent as "Authorization: Bearer <key>".
func NewOpenAIWire(apiKey string) Wire { return &openaiWire{key: apiKey} }

// chatURL: a URL with its scheme, the base URL an OpenAI client is given or the server's
// address.
func (w *openaiWire) ChatURL(raw string, u *url.URL) (string, error) {
	if !strings.Contains(raw, "://") {
		return "", fmt.Errorf("host %q: an OpenAI-compatible host is a URL with http:// or https://", raw)
	}
	return openaiURL(u, "chat/completions"), nil
}

// modelsURL is GET /v1/models of h: its model list, its probe and its models' windows.
func modelsURL(h Host) string { return openaiURL(h.Base, "models") }

// openaiURL is the address of path ("chat/completions", "models") under the base URL u. An
// OpenAI client's base URL usually ends in /v1 ("https://api.openai.com/v1"); a server's bare
// address ("http://10.0.0.5:8000") gets /v1 added.
func openaiURL(u *url.URL, path string) string {
	if strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/v1") {
		return u.JoinPath(path).String()
	}
	return u.JoinPath("v1", path).String()
}

// openaiChatRequest is the body of a streamed chat completion.
type openaiChatRequest struct {
	Model         string        `json:"model"`
	Messages      []chatMessage `json:"messages"`
	Stream        bool          `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Temperature *float64 `json:"temperature,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Seed        *int     `json:"seed,omitempty"`
	// ResponseFormat is OpenAI's response_format: json_object, or json_schema with a schema.
	ResponseFormat *openaiResponseFormat `json:"response_format,omitempty"`
}

type openaiResponseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict,omitempty"`
	} `json:"json_schema,omitempty"`
}

// TakesFormat: OpenAI's response_format.
func (w *openaiWire) TakesFormat() bool { return true }

func (w *openaiWire) Encode(req Request) ([]byte, error) {
	body := openaiChatRequest{Model: req.Model, Messages: chatMessages(req), Stream: true,
		Temperature: req.Temperature, MaxTokens: req.MaxTokens, Seed: req.Seed}
	// Usage in a last chunk before [DONE], so that token counts are the server's own.
	body.StreamOptions.IncludeUsage = true
	if f := req.Format; f != nil {
		body.ResponseFormat = &openaiResponseFormat{Type: "json_object"}
		if f.Schema != nil {
			body.ResponseFormat.Type = "json_schema"
			body.ResponseFormat.JSONSchema = &struct {
				Name   string          `json:"name"`
				Schema json.RawMessage `json:"schema"`
				Strict *bool           `json:"strict,omitempty"`
			}{Name: f.Name, Schema: f.Schema, Strict: f.Strict}
		}
	}
	return json.Marshal(&body)
}

// openaiStream is what one stream has told so far: the finish reason arrives in one chunk, the
// usage in a later one, and the end is "[DONE]" (or, from some servers, the body's end after a
// finish reason).
type openaiStream struct {
	finish       string
	promptTokens int
	outputTokens int
}

var sseDone = []byte("[DONE]")

// decodeOpenAILine reads one line of the event stream into c, which it zeroes first, the way
// decodeChunk reads one of Ollama's lines: the piece in c.Message.Content, the end in c.Done
// with the counts and reason, a server's error in c.Error. Lines that are not data (comments,
// "event:", "id:", "retry:") leave c empty.
func decodeOpenAILine(line []byte, c *Chunk, st *openaiStream) error {
	*c = Chunk{}
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return nil
	}
	data = trimSpace(data)
	if bytes.Equal(data, sseDone) {
		st.end(c)
		return nil
	}
	sc := scan{b: data}
	if err := sc.openaiChunk(c, st); err != nil {
		return fmt.Errorf("malformed event %q: %w", clip(line), err)
	}
	return nil
}

// openaiChunk walks one chat.completion.chunk the way chunk walks an Ollama line (see
// decode.go): the pieces of every choice's delta, the finish reason, the usage, or an
// error ({"message": ...} or a string). Other members are skipped without allocating.
func (s *scan) openaiChunk(c *Chunk, st *openaiStream) error {
	return s.document(func(key []byte) error {
		switch string(key) {
		case "choices":
			return s.array(func() error { return s.openaiChoice(c, st) })
		case "usage":
			return s.objectOrNull(func(key []byte) error {
				var err error
				switch string(key) {
				case "prompt_tokens":
					st.promptTokens, err = s.integer(st.promptTokens)
				case "completion_tokens":
					st.outputTokens, err = s.integer(st.outputTokens)
				default:
					err = s.skip()
				}
				return err
			})
		case "error":
			if s.peek() == '"' {
				var err error
				c.Error, err = s.str(c.Error)
				return err
			}
			start := s.i
			err := s.objectOrNull(func(key []byte) error {
				if string(key) == "message" {
					var err error
					c.Error, err = s.str(c.Error)
					return err
				}
				return s.skip()
			})
			if err == nil && c.Error == "" && s.b[start] == '{' { // an error without a message is still one
				c.Error = string(s.b[start:s.i])
			}
			return err
		default:
			return s.skip()
		}
	})
}

// openaiChoice reads one element of "choices": its delta's content and its finish reason.
func (s *scan) openaiChoice(c *Chunk, st *openaiStream) error {
	return s.objectOrNull(func(key []byte) error {
		switch string(key) {
		case "delta":
			return s.objectOrNull(func(key []byte) error {
				if string(key) != "content" {
					return s.skip()
				}
				piece, err := s.str("")
				c.Message.Content += piece
				return err
			})
		case "finish_reason":
			reason, err := s.str("")
			if reason != "" {
				st.finish = reason
			}
			return err
		default:
			return s.skip()
		}
	})
}

func (w *openaiWire) Header(h http.Header) {
	h.Set("Accept", "text/event-stream")
	w.authorize(h)
}

func (w *openaiWire) Decoder() StreamDecoder { return &openaiStream{} }

// Decode reads one line of the event stream (decodeOpenAILine).
func (st *openaiStream) Decode(line []byte, c *Chunk) error { return decodeOpenAILine(line, c, st) }

// AtEOF: some servers end the body after the finish reason without "data: [DONE]"; that is a
// complete stream. Without either, it was cut.
func (st *openaiStream) AtEOF(c *Chunk) bool {
	if st.finish == "" {
		return false
	}
	st.end(c)
	return true
}

// end makes c the stream's last chunk.
func (st *openaiStream) end(c *Chunk) {
	c.Done = true
	c.DoneReason = st.finish
	c.PromptEvalCount = st.promptTokens
	c.EvalCount = st.outputTokens
}

// openaiErrorMessage reads an OpenAI error: {"message": "...", "type": ..., "code": ...}, or a
// plain string as some servers send; an object without a message is given as it is.
func openaiErrorMessage(raw json.RawMessage) string {
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Message != "" {
		return obj.Message
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return strings.TrimSpace(string(raw))
}

// models lists the models of h (GET /v1/models).
func (w *openaiWire) models(ctx context.Context, h Host) ([]string, error) {
	resp, err := w.getModels(ctx, h)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", modelsURL(h), resp.Status, clip(bytes.TrimSpace(raw)))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("GET %s: %w", modelsURL(h), err)
	}
	ids := make([]string, len(list.Data))
	for i, m := range list.Data {
		ids[i] = m.ID
	}
	return ids, nil
}

// getModels sends GET /v1/models to h, with the key: the model check and the probe both ask it.
func (w *openaiWire) getModels(ctx context.Context, h Host) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, modelsURL(h), nil)
	if err != nil {
		return nil, err
	}
	w.authorize(req.Header)
	return h.Client.Do(req)
}

// errProbeStatus marks a host that answers its probe with a server error.
var errProbeStatus = errors.New("server error")

// probe: any answer to GET /v1/models below 500 shows a server (a 401 is a wrong key, which the
// first generation reports).
func (w *openaiWire) Probe(ctx context.Context, h Host) error {
	resp, err := w.getModels(ctx, h)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode >= http.StatusInternalServerError {
		return fmt.Errorf("%w: %s", errProbeStatus, resp.Status)
	}
	return nil
}

// authorize adds the bearer key, if there is one.
func (w *openaiWire) authorize(h http.Header) {
	if w.key != "" {
		h.Set("Authorization", "Bearer "+w.key)
	}
}

// CheckModels: GET /v1/models on h, every model looked for among the ids. Such hosts cannot
// pull models (pull is ignored): a missing one is reported.
func (w *openaiWire) CheckModels(ctx context.Context, h Host, models []string, _ bool) error {
	ids, err := w.models(ctx, h)
	if err != nil {
		h.Log.Error("model server does not answer its model list; check the host and the api_key in the config",
			zap.String("host", h.Name), zap.Error(err))
		return fmt.Errorf("openai host %s: %w", h.Name, &NoAnswerError{Err: err})
	}
	have := make(map[string]bool, len(ids))
	for _, id := range ids {
		have[NormalizeModel(id)] = true
	}
	missing := missingModels(models, have)
	h.Log.Info("model server answers", zap.String("host", h.Name), zap.Int("models", len(ids)), zap.Strings("missing", missing))
	var errs []error
	for _, m := range missing {
		h.Log.Error("model missing on the model server; serve it there (models cannot be pulled through the OpenAI API)",
			zap.String("host", h.Name), zap.String("model", m))
		errs = append(errs, fmt.Errorf("model %q is not served by openai host %s", m, h.Name))
	}
	return errors.Join(errs...)
}

// window looks for the model in the host's GET /v1/models and reads the field its server
// reports the window in: context_length (OpenRouter, LM Studio), max_model_len (vLLM),
// context_window, max_context_length, or meta.n_ctx_train (llama.cpp's server).
func (w *openaiWire) Window(ctx context.Context, h Host, model string) (int, error) {
	resp, err := w.getModels(ctx, h)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s: %s", modelsURL(h), resp.Status, clip(bytes.TrimSpace(raw)))
	}
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return 0, fmt.Errorf("GET %s: %w", modelsURL(h), err)
	}
	want := NormalizeModel(model)
	for _, m := range list.Data {
		if id, _ := m["id"].(string); NormalizeModel(id) != want {
			continue
		}
		for _, field := range []string{"context_length", "max_model_len", "context_window", "max_context_length"} {
			if n, ok := positiveInt(m[field]); ok {
				return n, nil
			}
		}
		if meta, ok := m["meta"].(map[string]any); ok {
			if n, ok := positiveInt(meta["n_ctx_train"]); ok {
				return n, nil
			}
		}
		return 0, ErrWindowUnknown
	}
	return 0, fmt.Errorf("model %q is not in the model list", model)
}

// tokenizeURL is POST /tokenize of h, beside /v1 (llama.cpp's server and vLLM have it).
func tokenizeURL(h Host) string {
	u := *h.Base
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	return u.JoinPath("tokenize").String()
}

// count asks POST /tokenize for the tokens of the system prompt's text (no chat template: the
// caller allows for it). One body serves both servers that have it: llama.cpp's server reads
// "content" and answers {"tokens": [...]}; vLLM reads "model" and "prompt" and answers
// {"count": n, "tokens": [...]}. A server without it (404, 405, 501, or an answer that holds no
// count) has no count: ErrCountUnknown.
func (w *openaiWire) Count(ctx context.Context, h Host, model, system string, _ int) (PromptCount, error) {
	body, err := json.Marshal(map[string]any{"model": model, "prompt": system, "content": system})
	if err != nil {
		return PromptCount{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tokenizeURL(h), bytes.NewReader(body))
	if err != nil {
		return PromptCount{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	w.authorize(req.Header)
	resp, err := h.Client.Do(req)
	if err != nil {
		return PromptCount{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return PromptCount{}, err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed ||
		resp.StatusCode == http.StatusNotImplemented:
		return PromptCount{}, fmt.Errorf("POST %s: %s: %w", tokenizeURL(h), resp.Status, ErrCountUnknown)
	case resp.StatusCode != http.StatusOK:
		return PromptCount{}, fmt.Errorf("POST %s: %s: %s", tokenizeURL(h), resp.Status, clip(bytes.TrimSpace(raw)))
	}
	var out struct {
		Count  any               `json:"count"`
		Tokens []json.RawMessage `json:"tokens"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return PromptCount{}, fmt.Errorf("POST %s: %w: %w", tokenizeURL(h), err, ErrCountUnknown)
	}
	n, ok := positiveInt(out.Count)
	if !ok {
		n = len(out.Tokens)
	}
	if n == 0 {
		return PromptCount{}, fmt.Errorf("POST %s: no tokens in the answer: %w", tokenizeURL(h), ErrCountUnknown)
	}
	return PromptCount{Tokens: n}, nil
}

// Interface guards
var _ Wire = (*openaiWire)(nil)
