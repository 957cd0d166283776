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
)

// The OpenAI-compatible wire: POST /v1/chat/completions with "stream": true, answered with
// server-sent events ("data: {chunk}" lines, "data: [DONE]" at the end). vLLM, llama.cpp's
// server, LM Studio, hosted services and Ollama itself speak it. Everything around the wire
// (hosts and failover, admission, the watchdog, typed errors, batching pieces into flushes) is
// the backend's own and the same for both wires (chat.go, attempt.go).

// The wires a backend can speak (ChatConfig.API).
const (
	APIOllama = "ollama" // Ollama's own /api/chat (NDJSON)
	APIOpenAI = "openai" // /v1/chat/completions (SSE), OpenAI-compatible servers
)

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
}

func encodeOpenAIChat(req Request) ([]byte, error) {
	body := openaiChatRequest{Model: req.Model, Messages: chatMessages(req), Stream: true,
		Temperature: req.Temperature, MaxTokens: req.MaxTokens, Seed: req.Seed}
	// Usage in a last chunk before [DONE], so that token counts are the server's own.
	body.StreamOptions.IncludeUsage = true
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
func decodeOpenAILine(line []byte, c *chatChunk, st *openaiStream) error {
	*c = chatChunk{}
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
func (s *scan) openaiChunk(c *chatChunk, st *openaiStream) error {
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
func (s *scan) openaiChoice(c *chatChunk, st *openaiStream) error {
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

// decode reads one line of the event stream (decodeOpenAILine).
func (st *openaiStream) decode(line []byte, c *chatChunk) error { return decodeOpenAILine(line, c, st) }

// atEOF: some servers end the body after the finish reason without "data: [DONE]"; that is a
// complete stream. Without either, it was cut.
func (st *openaiStream) atEOF(c *chatChunk) bool {
	if st.finish == "" {
		return false
	}
	st.end(c)
	return true
}

// end makes c the stream's last chunk.
func (st *openaiStream) end(c *chatChunk) {
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

// openaiModels lists the models of an OpenAI-compatible host (GET /v1/models).
func (c *Chat) openaiModels(ctx context.Context, h *chatHost) ([]string, error) {
	resp, err := c.getModels(ctx, h)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", h.modelsURL, resp.Status, clip(bytes.TrimSpace(raw)))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("GET %s: %w", h.modelsURL, err)
	}
	ids := make([]string, len(list.Data))
	for i, m := range list.Data {
		ids[i] = m.ID
	}
	return ids, nil
}

// getModels sends GET /v1/models to h, with the key: the model check and the probe both ask it.
func (c *Chat) getModels(ctx context.Context, h *chatHost) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.modelsURL, nil)
	if err != nil {
		return nil, err
	}
	c.authorize(req)
	return c.client.Do(req)
}

// errProbeStatus marks a host that answers its probe with a server error.
var errProbeStatus = errors.New("server error")

// openaiProbe checks that an OpenAI-compatible host answers: any answer to GET /v1/models below
// 500 shows a server (a 401 is a wrong key, which the first generation reports).
func (c *Chat) openaiProbe(ctx context.Context, h *chatHost) error {
	resp, err := c.getModels(ctx, h)
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

// authorize adds the bearer key of an OpenAI-compatible backend, if it has one.
func (c *Chat) authorize(req *http.Request) {
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
}
