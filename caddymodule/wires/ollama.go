package wires

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/internal/cfarg"
)

func init() {
	caddy.RegisterModule(Ollama{})
}

// Ollama is the wire of Ollama's own API (/api/chat, NDJSON): the start-up check reads the
// servers' versions and models and can pull a missing model, a model's window is read from
// /api/show.
type Ollama struct {
	// HostList are the Ollama servers, as URLs or, as Ollama reads OLLAMA_HOST, "host:port".
	// Default: $OLLAMA_HOST, else http://127.0.0.1:11434.
	HostList []string `json:"hosts,omitempty"`
	// KeepAlive is how long Ollama keeps a model loaded after a request (negative: forever).
	// Default: Ollama's own (5m, or the server's OLLAMA_KEEP_ALIVE).
	KeepAlive caddy.Duration `json:"keep_alive,omitempty"`
	// Pull pulls missing models at start (in the background, with progress in the log).
	// Default: off; missing models are reported in the log with the command to get them.
	Pull bool `json:"pull_models,omitempty"`

	wire backends.Wire
}

// CaddyModule returns the Caddy module information.
func (Ollama) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  Namespace + ".ollama",
		New: func() caddy.Module { return new(Ollama) },
	}
}

// Provision sets the default host and makes the wire.
func (o *Ollama) Provision(caddy.Context) error {
	if len(o.HostList) == 0 {
		if env := os.Getenv("OLLAMA_HOST"); env != "" {
			o.HostList = []string{env}
		} else {
			o.HostList = []string{backends.DefaultOllamaHost}
		}
	}
	var keepAlive *time.Duration
	if o.KeepAlive != 0 {
		ka := time.Duration(o.KeepAlive)
		keepAlive = &ka
	}
	o.wire = backends.NewOllamaWire(keepAlive)
	return nil
}

// Validate refuses an empty host.
func (o *Ollama) Validate() error {
	for _, u := range o.HostList {
		if strings.TrimSpace(u) == "" {
			return fmt.Errorf("ollama: empty host")
		}
	}
	return nil
}

// Hosts implements Module.
func (o *Ollama) Hosts() []string { return o.HostList }

// Wire implements Module.
func (o *Ollama) Wire() backends.Wire { return o.wire }

// PullModels implements Puller.
func (o *Ollama) PullModels() bool { return o.Pull }

// SizesContext implements ContextSizer: Ollama runs a model with the num_ctx of each request.
func (o *Ollama) SizesContext() bool { return true }

// UnmarshalCaddyfile reads the block of `wire ollama`.
//
// Syntax:
//
//	wire ollama {
//		hosts       <url> [<url>...]
//		keep_alive  <duration>
//		pull_models
//	}
func (o *Ollama) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return cfarg.Block(d, "ollama", func(name string) error {
		var err error
		switch name {
		case "hosts":
			if o.HostList = d.RemainingArgs(); len(o.HostList) == 0 {
				return d.ArgErr()
			}
		case "keep_alive":
			err = cfarg.Duration(d, &o.KeepAlive)
		case "pull_models":
			if d.NextArg() {
				return d.ArgErr()
			}
			o.Pull = true
		default:
			return d.Errf("ollama: unrecognized subdirective '%s'", name)
		}
		return err
	})
}

// Interface guards
var (
	_ Module                = (*Ollama)(nil)
	_ Puller                = (*Ollama)(nil)
	_ ContextSizer          = (*Ollama)(nil)
	_ caddy.Provisioner     = (*Ollama)(nil)
	_ caddy.Validator       = (*Ollama)(nil)
	_ caddyfile.Unmarshaler = (*Ollama)(nil)
)
