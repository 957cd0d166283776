package ollamatest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/ollama/ollama/api"
)

// The fault server's answers in each wire, rendered once per model (FaultServer.Set).

// ndjsonLines are cfg's answers in Ollama's /api/chat NDJSON.
func ndjsonLines(cfg FaultConfig) faultLines {
	created := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	piece := func(text string) []byte {
		return mustLine(api.ChatResponse{Model: cfg.Model, CreatedAt: created, Message: api.Message{Role: "assistant", Content: text}})
	}
	l := faultLines{
		mediaType: "application/x-ndjson",
		piece:     piece(cfg.Piece),
		done: mustLine(api.ChatResponse{
			Model: cfg.Model, CreatedAt: created,
			Message:    api.Message{Role: "assistant"},
			Done:       true,
			DoneReason: "stop",
			Metrics: api.Metrics{
				TotalDuration: time.Millisecond, LoadDuration: time.Microsecond,
				PromptEvalCount: 7, PromptEvalDuration: 100 * time.Microsecond,
				EvalCount: cfg.Pieces, EvalDuration: 900 * time.Microsecond,
			},
		}),
		errLine:   mustLine(map[string]string{"error": cfg.Message}),
		malformed: []byte("{\"model\":\"" + cfg.Model + "\",\"message\":{\"content\":\"trunc\n"),
	}
	l.fill(cfg, piece)
	return l
}

// openaiLines are cfg's answers as an OpenAI-compatible server streams them: one
// chat.completion.chunk event a piece, a chunk with the finish reason, one with the usage
// (stream_options.include_usage), then "data: [DONE]".
func openaiLines(cfg FaultConfig) faultLines {
	event := func(v any) []byte {
		return append(append([]byte("data: "), bytes.TrimSuffix(mustLine(v), []byte("\n"))...), "\n\n"...)
	}
	chunk := func(delta map[string]string, finish any) map[string]any {
		return map[string]any{
			"id": "chatcmpl-fault", "object": "chat.completion.chunk", "created": 1746100800, "model": cfg.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		}
	}
	piece := func(text string) []byte {
		return event(chunk(map[string]string{"role": "assistant", "content": text}, nil))
	}
	var done []byte
	done = append(done, event(chunk(map[string]string{}, "stop"))...)
	done = append(done, event(map[string]any{
		"id": "chatcmpl-fault", "object": "chat.completion.chunk", "created": 1746100800, "model": cfg.Model, "choices": []any{},
		"usage": map[string]int{"prompt_tokens": 7, "completion_tokens": cfg.Pieces, "total_tokens": 7 + cfg.Pieces},
	})...)
	done = append(done, "data: [DONE]\n\n"...)
	l := faultLines{
		mediaType: "text/event-stream",
		piece:     piece(cfg.Piece),
		done:      done,
		errLine:   event(openaiError(cfg.Message)),
		malformed: []byte("data: {\"choices\":[{\"delta\":{\"content\":\"trunc\n\n"),
	}
	l.fill(cfg, piece)
	return l
}

// fill renders the numbered pieces and the whole instant answer.
func (l *faultLines) fill(cfg FaultConfig, piece func(string) []byte) {
	if cfg.Numbered {
		l.pieces = make([][]byte, cfg.Pieces)
		for i := range l.pieces {
			l.pieces[i] = piece(cfg.Piece + strconv.Itoa(i) + " ")
		}
	}
	if cfg.Mode == FaultNone && cfg.Delay == 0 {
		if cfg.Numbered {
			l.fast = append(bytes.Join(l.pieces, nil), l.done...)
		} else {
			l.fast = append(bytes.Repeat(l.piece, cfg.Pieces), l.done...)
		}
	}
}

// openaiError is an OpenAI error body.
func openaiError(msg string) any {
	return map[string]any{"error": map[string]any{"message": msg, "type": "api_error", "param": nil, "code": nil}}
}

// openaiRequest is the part of a chat completion request the fault server records.
type openaiRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Stream        bool     `json:"stream"`
	Temperature   *float64 `json:"temperature"`
	MaxTokens     int      `json:"max_tokens"`
	Seed          *int     `json:"seed"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// chatOpenAI answers POST /v1/chat/completions. The request is recorded as the api.ChatRequest
// it amounts to (LastRequest): messages, and max_tokens, temperature and seed as options;
// LastAuthorization has its Authorization header.
func (f *FaultServer) chatOpenAI(w http.ResponseWriter, r *http.Request) {
	var oreq openaiRequest
	if err := json.NewDecoder(r.Body).Decode(&oreq); err != nil {
		writeJSON(w, http.StatusBadRequest, openaiError(err.Error()))
		return
	}
	f.mu.Lock()
	f.lastAuth = r.Header.Get("Authorization")
	f.mu.Unlock()
	req := api.ChatRequest{Model: oreq.Model, Stream: &oreq.Stream, Options: map[string]any{}}
	for _, m := range oreq.Messages {
		req.Messages = append(req.Messages, api.Message{Role: m.Role, Content: m.Content})
	}
	if oreq.MaxTokens > 0 {
		req.Options["num_predict"] = float64(oreq.MaxTokens)
	}
	if oreq.Temperature != nil {
		req.Options["temperature"] = *oreq.Temperature
	}
	if oreq.Seed != nil {
		req.Options["seed"] = float64(*oreq.Seed)
	}
	if oreq.StreamOptions != nil && oreq.StreamOptions.IncludeUsage {
		req.Options["include_usage"] = true
	}
	f.serve(w, r, req, func(m *faultModel) *faultLines { return &m.sse }, openaiError)
}

// openaiModels answers GET /v1/models with the configured models.
func (f *FaultServer) openaiModels(w http.ResponseWriter, r *http.Request) {
	f.mu.RLock()
	var data []any
	for _, m := range f.models {
		entry := map[string]any{"id": m.cfg.Model, "object": "model", "created": 1746100800, "owned_by": "fault"}
		if m.cfg.Window > 0 {
			entry["max_model_len"] = m.cfg.Window
		}
		data = append(data, entry)
	}
	f.mu.RUnlock()
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// LastAuthorization is the Authorization header of the last OpenAI-wire chat request.
func (f *FaultServer) LastAuthorization() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.lastAuth
}
