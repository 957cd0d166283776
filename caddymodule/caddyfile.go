package caddymodule

import (
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/caddy-textgen/textgen/caddymodule/internal/cfarg"
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
//		openai              <url> [<url>...]
//		api_key             <key, e.g. {env.OPENAI_API_KEY}>
//		wire <name> {
//			<the wire's own settings>
//		}
//		model               <name>
//		languages           <tag> [<tag>...]
//		max_input_chars     <n>
//		max_body_size       <size>
//		max_output_tokens   <n>
//		temperature         <0..2>
//		num_ctx             <n>
//		context             <model> <tokens>
//		connect_timeout     <duration>
//		first_piece_timeout <duration>
//		idle_timeout        <duration>
//		write_timeout       <duration>
//		generation_timeout  <duration>
//		seed                <n>
//		retention           <duration> | off
//		retention_key       <base64 of 32 bytes>
//		keep_alive          <duration>
//		hold_ttl            <duration>
//		pull_models
//		buy_url             <url>
//		log_prompts
//		rate_limit          key|account <n>/<window> [burst <n>] | off
//		auth_failure_limit  <n>/<window> [burst <n>] | off
//		max_concurrent_per_account <n> | off
//		max_in_flight       <n> | off
//		limits_store        <redis-url>
//		sse_keepalive       <duration> | off
//		cors_origins        <origin> [<origin>...] | *
//		slot_expiry         <duration>
//		queue_size          <n> | off
//		queue_timeout       <duration>
//		body_read_timeout   <duration>
//		tool <slug> {
//			model             <name>
//			ollama|openai     <url> [<url>...]
//			api_key           <key>
//			wire <name> { ... }
//			prompt_file       <path>
//			max_input_chars   <n>
//			max_output_tokens <n>
//			temperature       <0..2>
//			credits           <n>
//			rate_limit        key|account <n>/<window> [burst <n>]
//		}
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	handlerWire, toolWires := &wireDraft{}, map[string]*wireDraft{}
	var shared ollamaShared
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if name != "tool" {
			id := name
			if (name == "rate_limit" || name == "context") && d.NextArg() { // once per scope, per model
				id += " " + d.Val()
				d.Prev()
			}
			if seen[id] {
				return d.Errf("%s specified more than once", id)
			}
			seen[id] = true
		}
		if ok, err := handlerWire.parse(d); ok {
			if err != nil {
				return err
			}
			continue
		}
		var err error
		switch name {
		case "ledger":
			err = cfarg.String(d, &h.Ledger)
		case "ledger_cache_accounts":
			if err = cfarg.Int(d, &h.LedgerCacheAccounts); err == nil && h.LedgerCacheAccounts < 1 {
				err = d.Errf("ledger_cache_accounts: a number of accounts, at least 1")
			}
		case "model":
			err = cfarg.String(d, &h.Model)
		case "languages":
			h.Languages = d.RemainingArgs()
			if len(h.Languages) == 0 {
				return d.ArgErr()
			}
		case "max_input_chars":
			err = cfarg.Int(d, &h.MaxInputChars)
		case "max_body_size":
			var s string
			if err = cfarg.String(d, &s); err == nil {
				var n uint64
				if n, err = humanize.ParseBytes(s); err != nil {
					return d.Errf("max_body_size: %v", err)
				}
				h.MaxBodyBytes = int64(n)
			}
		case "max_output_tokens":
			err = cfarg.Int(d, &h.MaxOutputTokens)
		case "temperature":
			err = cfarg.Float(d, &h.Temperature)
		case "seed":
			var v string
			if err = cfarg.String(d, &v); err == nil {
				n, perr := strconv.Atoi(v)
				if perr != nil {
					return d.Errf("seed: %q is not a whole number", v)
				}
				h.Seed = &n
			}
		case "num_ctx":
			err = cfarg.Int(d, &h.NumCtx)
		case "context":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("context: a model and its window in tokens: context <model> <tokens>")
			}
			n, perr := strconv.Atoi(args[1])
			if perr != nil || n < 1 {
				return d.Errf("context: %q is not a number of tokens", args[1])
			}
			if h.Contexts == nil {
				h.Contexts = make(map[string]int)
			}
			h.Contexts[args[0]] = n
		case "connect_timeout":
			err = cfarg.Duration(d, &h.ConnectTimeout)
		case "first_piece_timeout":
			err = cfarg.Duration(d, &h.FirstPieceTimeout)
		case "idle_timeout":
			err = cfarg.Duration(d, &h.IdleTimeout)
		case "write_timeout":
			err = cfarg.Duration(d, &h.WriteTimeout)
		case "generation_timeout":
			err = cfarg.Duration(d, &h.GenerationTimeout)
		case "sse_keepalive":
			args := d.RemainingArgs()
			if len(args) != 1 {
				return d.ArgErr()
			}
			if args[0] == "off" {
				h.SSEKeepAlive = -1
				break
			}
			dur, perr := caddy.ParseDuration(args[0])
			if perr != nil || dur <= 0 {
				return d.Errf("sse_keepalive: %q is neither a positive duration nor off", args[0])
			}
			h.SSEKeepAlive = caddy.Duration(dur)
		case "retention":
			args := d.RemainingArgs()
			if len(args) != 1 {
				return d.ArgErr()
			}
			if args[0] == "off" {
				h.Retention = -1
				break
			}
			dur, perr := caddy.ParseDuration(args[0])
			if perr != nil || dur <= 0 {
				return d.Errf("retention: %q is neither a positive duration nor off", args[0])
			}
			h.Retention = caddy.Duration(dur)
		case "retention_key":
			err = cfarg.String(d, &h.RetentionKey)
		case "keep_alive":
			err = cfarg.Duration(d, &shared.keepAlive)
		case "hold_ttl":
			err = cfarg.Duration(d, &h.HoldTTL)
		case "pull_models":
			if d.NextArg() {
				return d.ArgErr()
			}
			shared.pull = true
		case "buy_url":
			err = cfarg.String(d, &h.BuyURL)
		case "default_language":
			err = cfarg.String(d, &h.DefaultLanguage)
		case "log_prompts":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.LogPrompts = true
		case "rate_limit":
			if h.RateLimit == nil {
				h.RateLimit = &RateLimits{}
			}
			err = rateLimitScope(d, h.RateLimit, true)
		case "auth_failure_limit":
			h.AuthFailureLimit, err = parseRateLimit(d, true)
		case "max_concurrent_per_account":
			err = intOrOff(d, &h.MaxConcurrentPerAccount)
		case "max_in_flight":
			err = intOrOff(d, &h.MaxInFlight)
		case "limits_store":
			err = cfarg.String(d, &h.LimitsStore)
		case "cors_origins":
			h.CORSOrigins = d.RemainingArgs()
			if len(h.CORSOrigins) == 0 {
				return d.ArgErr()
			}
		case "slot_expiry":
			err = cfarg.Duration(d, &h.SlotExpiry)
		case "queue_size":
			err = intOrOff(d, &h.QueueSize)
		case "queue_timeout":
			err = cfarg.Duration(d, &h.QueueTimeout)
		case "body_read_timeout":
			err = cfarg.Duration(d, &h.BodyReadTimeout)
		case "tool":
			err = h.unmarshalTool(d, toolWires)
		default:
			return d.Errf("unrecognized textgen subdirective '%s'", name)
		}
		if err != nil {
			return err
		}
	}
	return h.setWires(d, handlerWire, toolWires, shared)
}

// unmarshalTool reads a tool block; its model servers go into wires, by slug.
func (h *Handler) unmarshalTool(d *caddyfile.Dispenser, wires map[string]*wireDraft) error {
	var slug string
	if err := cfarg.String(d, &slug); err != nil {
		return err
	}
	if h.Tools == nil {
		h.Tools = map[string]*ToolConfig{}
	}
	if _, dup := h.Tools[slug]; dup {
		return d.Errf("tool %s specified more than once", slug)
	}
	tc, wire := &ToolConfig{}, &wireDraft{where: "tool " + slug + ": "}
	h.Tools[slug], wires[slug] = tc, wire
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		id := name
		if name == "rate_limit" && d.NextArg() {
			id += " " + d.Val()
			d.Prev()
		}
		if seen[id] {
			return d.Errf("tool %s: %s specified more than once", slug, id)
		}
		seen[id] = true
		if ok, err := wire.parse(d); ok {
			if err != nil {
				return err
			}
			continue
		}
		var err error
		switch name {
		case "model":
			err = cfarg.String(d, &tc.Model)
		case "prompt_file":
			err = cfarg.String(d, &tc.PromptFile)
		case "max_input_chars":
			err = cfarg.Int(d, &tc.MaxInputChars)
		case "max_output_tokens":
			err = cfarg.Int(d, &tc.MaxOutputTokens)
		case "temperature":
			err = cfarg.Float(d, &tc.Temperature)
		case "credits":
			var n int
			if err = cfarg.Int(d, &n); err == nil && n == 0 {
				err = d.Errf("tool %s: credits: a tool costs at least 1 credit", slug)
			}
			tc.Credits = int64(n)
		case "rate_limit":
			if tc.RateLimit == nil {
				tc.RateLimit = &RateLimits{}
			}
			err = rateLimitScope(d, tc.RateLimit, false)
		default:
			return d.Errf("tool %s: unrecognized subdirective '%s'", slug, name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// rateLimitScope reads "key|account <n>/<window> [burst <n>]" (or "off" where allowed) into rl.
func rateLimitScope(d *caddyfile.Dispenser, rl *RateLimits, offAllowed bool) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	var dst **RateLimit
	switch scope := d.Val(); scope {
	case "key":
		dst = &rl.Key
	case "account":
		dst = &rl.Account
	default:
		return d.Errf("rate_limit: %q is neither key nor account", scope)
	}
	l, err := parseRateLimit(d, offAllowed)
	*dst = l
	return err
}

// parseRateLimit reads "<n>/<window> [burst <n>]" or "off". The window is a duration ("1m",
// "10s", "1h"); a bare unit ("m") means 1 of it.
func parseRateLimit(d *caddyfile.Dispenser, offAllowed bool) (*RateLimit, error) {
	name := d.Val()
	args := d.RemainingArgs()
	if len(args) == 1 && args[0] == "off" {
		if !offAllowed {
			return nil, d.Errf("%s: off is only allowed for the handler-wide limits", name)
		}
		return &RateLimit{Off: true}, nil
	}
	if len(args) != 1 && len(args) != 3 {
		return nil, d.ArgErr()
	}
	n, win, ok := strings.Cut(args[0], "/")
	requests, err := strconv.Atoi(n)
	if !ok || err != nil || requests <= 0 {
		return nil, d.Errf("%s: %q is not <requests>/<window>, such as 60/1m", name, args[0])
	}
	if win != "" && strings.Trim(win, "smh") == "" && len(win) == 1 {
		win = "1" + win
	}
	dur, err := caddy.ParseDuration(win)
	if err != nil || dur < time.Second {
		return nil, d.Errf("%s: window %q is not a duration of at least 1s", name, win)
	}
	l := &RateLimit{Requests: requests, Window: caddy.Duration(dur)}
	if len(args) == 3 {
		b, err := strconv.Atoi(args[2])
		if args[1] != "burst" || err != nil || b <= 0 {
			return nil, d.Errf("%s: expected burst <n> after the rate, got %q %q", name, args[1], args[2])
		}
		l.Burst = b
	}
	return l, nil
}

// intOrOff reads a whole number > 0, or "off" (stored as -1).
func intOrOff(d *caddyfile.Dispenser, dst *int) error {
	name := d.Val()
	var s string
	if err := cfarg.String(d, &s); err != nil {
		return err
	}
	if s == "off" {
		*dst = -1
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return d.Errf("%s: %q is neither a whole number > 0 nor off", name, s)
	}
	*dst = n
	return nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Handler)(nil)
