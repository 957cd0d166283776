// Package wirestest is a wire written the way another plugin would write one, outside backends
// and caddymodule/wires: textgen.wires.ollama_generate speaks Ollama's /api/generate (a system
// prompt and a prompt, answered with NDJSON lines of "response" pieces) instead of its chat API.
// The tests that prove a third wire plugs into the handler load it with `wire ollama_generate`;
// nothing but tests imports this package.
package wirestest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/wires"
)

func init() {
	caddy.RegisterModule(Generate{})
}

// Generate is the module: the Ollama servers to send /api/generate requests to.
type Generate struct {
	// HostList are the servers' URLs. Required.
	HostList []string `json:"hosts,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Generate) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  wires.Namespace + ".ollama_generate",
		New: func() caddy.Module { return new(Generate) },
	}
}

// Validate requires a host.
func (g *Generate) Validate() error {
	if len(g.HostList) == 0 {
		return fmt.Errorf("ollama_generate: hosts: at least one is required")
	}
	return nil
}

// Hosts implements wires.Module.
func (g *Generate) Hosts() []string { return g.HostList }

// Wire implements wires.Module.
func (g *Generate) Wire() backends.Wire { return generateWire{} }

// UnmarshalCaddyfile reads `wire ollama_generate { hosts <url>... }`.
func (g *Generate) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the wire's name
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if d.Val() != "hosts" {
			return d.Errf("ollama_generate: unrecognized subdirective '%s'", d.Val())
		}
		if g.HostList = d.RemainingArgs(); len(g.HostList) == 0 {
			return d.ArgErr()
		}
	}
	return nil
}

// generateWire is the backends.Wire of /api/generate. It reports no window and counts no
// prompt: the handler then sizes prompts by their bytes, as for most OpenAI-compatible servers.
type generateWire struct{}

func (generateWire) ChatURL(_ string, base *url.URL) (string, error) {
	return base.JoinPath("/api/generate").String(), nil
}

// generateRequest is the body of a streamed /api/generate request.
type generateRequest struct {
	Model   string         `json:"model"`
	System  string         `json:"system,omitempty"`
	Prompt  string         `json:"prompt"`
	Stream  bool           `json:"stream"`
	Options map[string]any `json:"options,omitempty"`
}

func (generateWire) Encode(req backends.Request) ([]byte, error) {
	body := generateRequest{Model: req.Model, System: req.System, Prompt: req.Prompt, Stream: true, Options: map[string]any{}}
	if req.MaxTokens > 0 {
		body.Options["num_predict"] = req.MaxTokens
	}
	if req.Temperature != nil {
		body.Options["temperature"] = *req.Temperature
	}
	if req.Seed != nil {
		body.Options["seed"] = *req.Seed
	}
	return json.Marshal(body)
}

func (generateWire) Header(h http.Header) { h.Set("Accept", "application/x-ndjson") }

func (generateWire) Decoder() backends.StreamDecoder { return generateLines{} }

// generateLines decodes /api/generate's NDJSON: every line a piece in "response", the last one
// "done":true with the counts.
type generateLines struct{}

func (generateLines) Decode(line []byte, c *backends.Chunk) error {
	*c = backends.Chunk{}
	var l struct {
		Response        string `json:"response"`
		Done            bool   `json:"done"`
		DoneReason      string `json:"done_reason"`
		Error           string `json:"error"`
		PromptEvalCount int    `json:"prompt_eval_count"`
		EvalCount       int    `json:"eval_count"`
	}
	if err := json.Unmarshal(line, &l); err != nil {
		return fmt.Errorf("malformed line %q: %w", line, err)
	}
	c.Message.Content, c.Done, c.DoneReason, c.Error = l.Response, l.Done, l.DoneReason, l.Error
	c.PromptEvalCount, c.EvalCount = l.PromptEvalCount, l.EvalCount
	return nil
}

// AtEOF: a stream ends with its done line; the body's end before it is a cut.
func (generateLines) AtEOF(*backends.Chunk) bool { return false }

// Probe: GET / answers 200 on a running Ollama.
func (generateWire) Probe(ctx context.Context, h backends.Host) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.Base.String(), nil)
	if err != nil {
		return err
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", h.Base, resp.Status)
	}
	return nil
}

// CheckModels checks that h answers; it does not list the models.
func (w generateWire) CheckModels(ctx context.Context, h backends.Host, _ []string, _ bool) error {
	if err := w.Probe(ctx, h); err != nil {
		return fmt.Errorf("host %s does not answer: %w", h.Name, &backends.NoAnswerError{Err: err})
	}
	return nil
}

func (generateWire) Window(context.Context, backends.Host, string) (int, error) {
	return 0, backends.ErrWindowUnknown
}

func (generateWire) Count(context.Context, backends.Host, string, string, int) (backends.PromptCount, error) {
	return backends.PromptCount{}, backends.ErrCountUnknown
}

// Interface guards
var (
	_ wires.Module          = (*Generate)(nil)
	_ caddy.Validator       = (*Generate)(nil)
	_ caddyfile.Unmarshaler = (*Generate)(nil)
	_ backends.Wire         = generateWire{}
)
