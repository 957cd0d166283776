package caddymodule

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("textgen", parseCaddyfile)
	// A terminal handler: before respond, so "textgen /api/*" next to a catch-all respond works
	// in a site block without a route.
	httpcaddyfile.RegisterDirectiveOrder("textgen", httpcaddyfile.Before, "respond")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var t Handler
	err := t.UnmarshalCaddyfile(h.Dispenser)
	return &t, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens.
//
// Syntax:
//
//	textgen [<matcher>] {
//		ledger              <dir>
//		ollama              <url> [<url>...]
//		model               <name>
//		languages           <tag> [<tag>...]
//		max_input_chars     <n>
//		max_body_size       <size>
//		max_output_tokens   <n>
//		temperature         <0..2>
//		num_ctx             <n>
//		connect_timeout     <duration>
//		first_piece_timeout <duration>
//		idle_timeout        <duration>
//		generation_timeout  <duration>
//		keep_alive          <duration>
//		hold_ttl            <duration>
//		pull_models
//		buy_url             <url>
//		log_prompts
//		tool <slug> {
//			model             <name>
//			prompt_file       <path>
//			max_input_chars   <n>
//			max_output_tokens <n>
//			temperature       <0..2>
//		}
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if name != "tool" {
			if seen[name] {
				return d.Errf("%s specified more than once", name)
			}
			seen[name] = true
		}
		var err error
		switch name {
		case "ledger":
			err = oneString(d, &h.Ledger)
		case "ollama":
			h.Ollama = d.RemainingArgs()
			if len(h.Ollama) == 0 {
				return d.ArgErr()
			}
		case "model":
			err = oneString(d, &h.Model)
		case "languages":
			h.Languages = d.RemainingArgs()
			if len(h.Languages) == 0 {
				return d.ArgErr()
			}
		case "max_input_chars":
			err = oneInt(d, &h.MaxInputChars)
		case "max_body_size":
			var s string
			if err = oneString(d, &s); err == nil {
				var n uint64
				if n, err = humanize.ParseBytes(s); err != nil {
					return d.Errf("max_body_size: %v", err)
				}
				h.MaxBodyBytes = int64(n)
			}
		case "max_output_tokens":
			err = oneInt(d, &h.MaxOutputTokens)
		case "temperature":
			err = oneFloat(d, &h.Temperature)
		case "num_ctx":
			err = oneInt(d, &h.NumCtx)
		case "connect_timeout":
			err = oneDuration(d, &h.ConnectTimeout)
		case "first_piece_timeout":
			err = oneDuration(d, &h.FirstPieceTimeout)
		case "idle_timeout":
			err = oneDuration(d, &h.IdleTimeout)
		case "generation_timeout":
			err = oneDuration(d, &h.GenerationTimeout)
		case "keep_alive":
			err = oneDuration(d, &h.KeepAlive)
		case "hold_ttl":
			err = oneDuration(d, &h.HoldTTL)
		case "pull_models":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.PullModels = true
		case "buy_url":
			err = oneString(d, &h.BuyURL)
		case "log_prompts":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.LogPrompts = true
		case "tool":
			err = h.unmarshalTool(d)
		default:
			return d.Errf("unrecognized textgen subdirective '%s'", name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (h *Handler) unmarshalTool(d *caddyfile.Dispenser) error {
	var slug string
	if err := oneString(d, &slug); err != nil {
		return err
	}
	if h.Tools == nil {
		h.Tools = map[string]*ToolConfig{}
	}
	if _, dup := h.Tools[slug]; dup {
		return d.Errf("tool %s specified more than once", slug)
	}
	tc := &ToolConfig{}
	h.Tools[slug] = tc
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if seen[name] {
			return d.Errf("tool %s: %s specified more than once", slug, name)
		}
		seen[name] = true
		var err error
		switch name {
		case "model":
			err = oneString(d, &tc.Model)
		case "prompt_file":
			err = oneString(d, &tc.PromptFile)
		case "max_input_chars":
			err = oneInt(d, &tc.MaxInputChars)
		case "max_output_tokens":
			err = oneInt(d, &tc.MaxOutputTokens)
		case "temperature":
			err = oneFloat(d, &tc.Temperature)
		default:
			return d.Errf("tool %s: unrecognized subdirective '%s'", slug, name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// oneString reads exactly one argument.
func oneString(d *caddyfile.Dispenser, dst *string) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	*dst = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

func oneInt(d *caddyfile.Dispenser, dst *int) error {
	name := d.Val()
	var s string
	if err := oneString(d, &s); err != nil {
		return err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return d.Errf("%s: %q is not a whole number >= 0", name, s)
	}
	*dst = n
	return nil
}

func oneFloat(d *caddyfile.Dispenser, dst **float64) error {
	name := d.Val()
	var s string
	if err := oneString(d, &s); err != nil {
		return err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return d.Errf("%s: %q is not a number", name, s)
	}
	*dst = &f
	return nil
}

func oneDuration(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	name := d.Val()
	var s string
	if err := oneString(d, &s); err != nil {
		return err
	}
	dur, err := caddy.ParseDuration(s)
	if err != nil {
		return d.Errf("%s: %v", name, err)
	}
	if dur < 0 {
		return d.Errf("%s: must not be negative", name)
	}
	*dst = caddy.Duration(dur)
	return nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Handler)(nil)
