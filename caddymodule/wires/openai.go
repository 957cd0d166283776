package wires

import (
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/internal/cfarg"
)

func init() {
	caddy.RegisterModule(OpenAI{})
}

// OpenAI is the wire of OpenAI-compatible model servers (/v1/chat/completions with server-sent
// events: vLLM, llama.cpp's server, LM Studio, a hosted API, and Ollama too). Models cannot be
// pulled through it; most such servers do not report a model's window (the handler's context
// setting says it).
type OpenAI struct {
	// HostList are the servers' base URLs: "https://api.example.com/v1", or a server's address,
	// to which /v1 is added. Required.
	HostList []string `json:"hosts,omitempty"`
	// APIKey is sent as "Authorization: Bearer <key>", usually a placeholder such as
	// {env.OPENAI_API_KEY} (resolved at start, so the key is not in the config). Default: none.
	APIKey string `json:"api_key,omitempty"`

	wire backends.Wire
}

// CaddyModule returns the Caddy module information.
func (OpenAI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  Namespace + ".openai",
		New: func() caddy.Module { return new(OpenAI) },
	}
}

// Provision resolves the key's placeholders and makes the wire. The key resolved stays in the
// module, so that Key tells a changed key apart.
func (o *OpenAI) Provision(caddy.Context) error {
	o.APIKey = caddy.NewReplacer().ReplaceAll(o.APIKey, "")
	o.wire = backends.NewOpenAIWire(o.APIKey)
	return nil
}

// Validate refuses a host that is not an http:// or https:// URL, and no host.
func (o *OpenAI) Validate() error {
	if len(o.HostList) == 0 {
		return fmt.Errorf("openai: hosts: the base URL of at least one server is required")
	}
	for _, u := range o.HostList {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("openai: host %q is not an http:// or https:// URL", u)
		}
	}
	return nil
}

// Hosts implements Module.
func (o *OpenAI) Hosts() []string { return o.HostList }

// Wire implements Module.
func (o *OpenAI) Wire() backends.Wire { return o.wire }

// UnmarshalCaddyfile reads the block of `wire openai`.
//
// Syntax:
//
//	wire openai {
//		hosts   <url> [<url>...]
//		api_key <key, e.g. {env.OPENAI_API_KEY}>
//	}
func (o *OpenAI) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return cfarg.Block(d, "openai", func(name string) error {
		var err error
		switch name {
		case "hosts":
			if o.HostList = d.RemainingArgs(); len(o.HostList) == 0 {
				return d.ArgErr()
			}
		case "api_key":
			err = cfarg.String(d, &o.APIKey)
		default:
			return d.Errf("openai: unrecognized subdirective '%s'", name)
		}
		return err
	})
}

// Interface guards
var (
	_ Module                = (*OpenAI)(nil)
	_ caddy.Provisioner     = (*OpenAI)(nil)
	_ caddy.Validator       = (*OpenAI)(nil)
	_ caddyfile.Unmarshaler = (*OpenAI)(nil)
)
