package backends

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ollama/ollama/api"
	"go.uber.org/zap"
)

// Ollama's own wire: POST /api/chat answered with NDJSON (a chunk a line, the last one
// "done":true), HEAD / as the health probe, /api/version and /api/tags for the start-up check,
// /api/pull to fetch a missing model, /api/show for a model's context window. All but the chat
// stream go through the ollama api package's client; the stream is read here (attempt.go says
// why).

// ollamaWire speaks Ollama's API.
type ollamaWire struct {
	// keepAlive is sent with every chat request; nil: Ollama's default.
	keepAlive *api.Duration
}

// NewOllamaWire is the wire of Ollama's own API (the default of ChatConfig.Wire). keepAlive is
// sent as keep_alive with every request: how long Ollama keeps the model loaded afterwards
// (negative: forever, 0: unload at once); nil: Ollama's own default (5 minutes, or the server's
// OLLAMA_KEEP_ALIVE). Its hosts may also be written as Ollama reads OLLAMA_HOST ("host:port").
func NewOllamaWire(keepAlive *time.Duration) Wire {
	w := &ollamaWire{}
	if keepAlive != nil {
		w.keepAlive = &api.Duration{Duration: *keepAlive}
	}
	return w
}

// ollamaClient is the api package's client for h, on the Chat's Transport.
func ollamaClient(h Host) *api.Client { return api.NewClient(h.Base, h.Client) }

// chatURL: any host ParseOllamaHost reads, with or without a scheme.
func (w *ollamaWire) ChatURL(_ string, u *url.URL) (string, error) {
	return u.JoinPath("/api/chat").String(), nil
}

func (w *ollamaWire) Encode(req Request) ([]byte, error) {
	body := ollamaChatRequest{Model: req.Model, Messages: chatMessages(req), Stream: true, KeepAlive: w.keepAlive,
		Truncate: &noCut, Shift: &noCut}
	body.Options.NumPredict, body.Options.Temperature = req.MaxTokens, req.Temperature
	body.Options.NumCtx, body.Options.Seed = req.NumCtx, req.Seed
	if f := req.Format; f != nil {
		// Ollama's format: "json" for any JSON object, else the schema itself.
		body.Format = jsonFormat
		if f.Schema != nil {
			body.Format = f.Schema
		}
	}
	return json.Marshal(&body)
}

// TakesFormat: Ollama's format field (since 0.5: a JSON schema too).
func (w *ollamaWire) TakesFormat() bool { return true }

// jsonFormat is Ollama's format for any JSON object.
var jsonFormat = json.RawMessage(`"json"`)

// noCut is the false that Truncate and Shift point to.
var noCut = false

// ollamaChatRequest is the part of api.ChatRequest this backend sends, as a plain struct: an
// api.ChatRequest with its options in a map took twice the time and allocations to encode (a
// test checks both give the same JSON).
type ollamaChatRequest struct {
	Model     string          `json:"model"`
	Messages  []chatMessage   `json:"messages"`
	Stream    bool            `json:"stream"`
	Format    json.RawMessage `json:"format,omitempty"`
	KeepAlive *api.Duration   `json:"keep_alive,omitempty"`
	Options   struct {
		NumPredict  int      `json:"num_predict,omitempty"`
		Temperature *float64 `json:"temperature,omitempty"`
		NumCtx      int      `json:"num_ctx,omitempty"`
		Seed        *int     `json:"seed,omitempty"`
	} `json:"options"`
	// Truncate and Shift false: a server that knows them (recent Ollama) refuses a prompt that
	// does not fit (KindTooLong) and stops at the context's end rather than cutting the prompt
	// or dropping the start of the context; older servers ignore them.
	Truncate *bool `json:"truncate,omitempty"`
	Shift    *bool `json:"shift,omitempty"`
}

func (w *ollamaWire) Header(h http.Header) { h.Set("Accept", "application/x-ndjson") }

func (w *ollamaWire) Decoder() StreamDecoder { return ollamaLines{} }

// ollamaLines decodes Ollama's NDJSON: every line a chunk, the end a "done":true chunk.
type ollamaLines struct{}

func (ollamaLines) Decode(line []byte, c *Chunk) error { return decodeChunk(line, c) }
func (ollamaLines) AtEOF(*Chunk) bool                  { return false }

// decodeChunk parses one line into c, which it zeroes first. Keys match exactly (encoding/json
// would also accept other letter cases; Ollama never sends them). The walker is decode.go's.
func decodeChunk(line []byte, c *Chunk) error {
	*c = Chunk{}
	s := scan{b: line}
	if err := s.chunk(c); err != nil {
		return fmt.Errorf("malformed line %q: %w", clip(line), err)
	}
	return nil
}

func (s *scan) chunk(c *Chunk) error {
	return s.document(func(key []byte) error {
		var err error
		switch string(key) {
		case "message":
			err = s.message(c)
		case "done":
			c.Done, err = s.boolean(c.Done)
		case "done_reason":
			c.DoneReason, err = s.str(c.DoneReason)
		case "error":
			c.Error, err = s.str(c.Error)
		case "prompt_eval_count":
			c.PromptEvalCount, err = s.integer(c.PromptEvalCount)
		case "eval_count":
			c.EvalCount, err = s.integer(c.EvalCount)
		default:
			err = s.skip()
		}
		return err
	})
}

func (s *scan) message(c *Chunk) error {
	return s.objectOrNull(func(key []byte) error {
		if string(key) == "content" {
			var err error
			c.Message.Content, err = s.str(c.Message.Content)
			return err
		}
		return s.skip()
	})
}

// probe: HEAD /, which Ollama answers with 200 "Ollama is running".
func (w *ollamaWire) Probe(ctx context.Context, h Host) error {
	return ollamaClient(h).Heartbeat(ctx)
}

// CheckModels asks h for its version and its models, and pulls a missing model when pull is
// set, else names the command that does.
func (w *ollamaWire) CheckModels(ctx context.Context, h Host, models []string, pull bool) error {
	oc := ollamaClient(h)
	version, err := oc.Version(ctx)
	if err != nil {
		h.Log.Error("ollama host does not answer; start it with `ollama serve` there, or fix the host in the config",
			zap.String("host", h.Name), zap.Error(err))
		return fmt.Errorf("ollama host %s does not answer: %w", h.Name, &NoAnswerError{Err: err})
	}
	list, err := oc.List(ctx)
	if err != nil {
		h.Log.Error("ollama host cannot list its models", zap.String("host", h.Name), zap.Error(err))
		return fmt.Errorf("ollama host %s: listing models: %w", h.Name, err)
	}
	have := make(map[string]bool, 2*len(list.Models))
	for _, m := range list.Models {
		have[NormalizeModel(m.Name)] = true
		have[NormalizeModel(m.Model)] = true
	}
	missing := missingModels(models, have)
	h.Log.Info("ollama host answers",
		zap.String("host", h.Name), zap.String("version", version),
		zap.Int("models", len(list.Models)), zap.Strings("missing", missing))

	var errs []error
	for _, m := range missing {
		command := pullCommand(h, m)
		if !pull {
			h.Log.Error("model missing on ollama host; pull it with the command given, or enable pulling in the config",
				zap.String("host", h.Name), zap.String("model", m), zap.String("command", command))
			errs = append(errs, fmt.Errorf("model %q is missing on ollama host %s (run: %s)", m, h.Name, command))
			continue
		}
		h.Log.Info("pulling missing model", zap.String("host", h.Name), zap.String("model", m))
		if err := w.pull(ctx, h, m); err != nil {
			h.Log.Error("pulling model failed; pull it by hand with the command given",
				zap.String("host", h.Name), zap.String("model", m), zap.String("command", command), zap.Error(err))
			errs = append(errs, fmt.Errorf("pulling model %q on ollama host %s: %w", m, h.Name, err))
			continue
		}
		h.Log.Info("pulled model", zap.String("host", h.Name), zap.String("model", m))
	}
	return errors.Join(errs...)
}

// pullLogInterval throttles pull progress in the log; a variable so tests can shorten it.
var pullLogInterval = 5 * time.Second

// pull pulls model onto h, logging its progress.
func (w *ollamaWire) pull(ctx context.Context, h Host, model string) error {
	var (
		lastStatus string
		lastLog    time.Time
	)
	err := ollamaClient(h).Pull(ctx, &api.PullRequest{Model: model}, func(p api.ProgressResponse) error {
		now := time.Now()
		if p.Status == lastStatus && now.Sub(lastLog) < pullLogInterval {
			return nil
		}
		lastStatus, lastLog = p.Status, now
		fields := []zap.Field{zap.String("host", h.Name), zap.String("model", model), zap.String("status", p.Status)}
		if p.Total > 0 {
			fields = append(fields,
				zap.String("progress", fmt.Sprintf("%.1f%%", 100*float64(p.Completed)/float64(p.Total))),
				zap.Int64("completed_bytes", p.Completed), zap.Int64("total_bytes", p.Total))
		}
		h.Log.Info("pulling model", fields...)
		return nil
	})
	// The api client reports a stream cut short as success; Ollama's last line is "success".
	if err == nil && lastStatus != "success" {
		err = fmt.Errorf("pull ended without success (last status %q)", lastStatus)
	}
	return err
}

// pullCommand is the shell command an operator runs to get model onto h.
func pullCommand(h Host, model string) string {
	if h.Name == DefaultOllamaHost {
		return "ollama pull " + model
	}
	return "OLLAMA_HOST=" + h.Name + " ollama pull " + model
}

// window reads the model's context length from Ollama's /api/show (the
// "<architecture>.context_length" of the model file).
func (w *ollamaWire) Window(ctx context.Context, h Host, model string) (int, error) {
	show, err := ollamaClient(h).Show(ctx, &api.ShowRequest{Model: model})
	if err != nil {
		return 0, err
	}
	for k, v := range show.ModelInfo {
		if !strings.HasSuffix(k, ".context_length") {
			continue
		}
		if n, ok := positiveInt(v); ok {
			return n, nil
		}
	}
	return 0, ErrWindowUnknown
}

// count runs a chat of the system prompt and an empty input with one token of answer (Ollama
// v0.6.8 reads num_predict 0 as no limit) and the context the model runs with, and reads the
// prompt's tokens from prompt_eval_count: the chat template, the system prompt and the empty
// input, as the server counts them. The count a server gives for a prompt that fills its whole
// context may be of a cut prompt: that is no count.
func (w *ollamaWire) Count(ctx context.Context, h Host, model, system string, numCtx int) (PromptCount, error) {
	stream := false
	opts := map[string]any{"num_predict": 1}
	if numCtx > 0 {
		opts["num_ctx"] = numCtx
	}
	req := &api.ChatRequest{Model: model, Stream: &stream, KeepAlive: w.keepAlive, Options: opts,
		Messages: []api.Message{{Role: "system", Content: system}, {Role: "user", Content: ""}}}
	n := 0
	err := ollamaClient(h).Chat(ctx, req, func(r api.ChatResponse) error {
		if r.Done {
			n = r.PromptEvalCount
		}
		return nil
	})
	switch {
	case err != nil:
		return PromptCount{}, err
	case n <= 0:
		return PromptCount{}, ErrCountUnknown
	case numCtx > 0 && n >= numCtx-1:
		return PromptCount{}, fmt.Errorf("the system prompt fills the context of %d tokens: %w", numCtx, ErrCountUnknown)
	}
	return PromptCount{Tokens: n, Templated: true}, nil
}

// Interface guards
var _ Wire = (*ollamaWire)(nil)
