package console

import (
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-textgen/textgen/caddymodule/internal/cfarg"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("textgen_console", parseCaddyfile)
	// Beside textgen_account, before textgen: the console sees its own paths first.
	httpcaddyfile.RegisterDirectiveOrder("textgen_console", httpcaddyfile.After, "copy_response")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var c Handler
	err := c.UnmarshalCaddyfile(h.Dispenser)
	return &c, err
}

// UnmarshalCaddyfile sets up the console from Caddyfile tokens.
//
// Syntax:
//
//	textgen_console [<matcher>] {
//		ledger              <dir|postgres-url>
//		limits_store        <redis-url>
//		path_prefix         <path>
//		session_lifetime    <duration>
//		idle_timeout        <duration>
//		cookie_name         <name>
//		console_key         <base64>   # e.g. {env.TEXTGEN_CONSOLE_KEY}
//		support_grant_limit <credits>
//		site_name           <name>
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if seen[name] {
			return d.Errf("%s specified more than once", name)
		}
		seen[name] = true
		var err error
		switch name {
		case "ledger":
			err = cfarg.String(d, &h.Ledger)
		case "limits_store":
			err = cfarg.String(d, &h.LimitsStore)
		case "path_prefix":
			err = cfarg.String(d, &h.PathPrefix)
		case "session_lifetime":
			err = cfarg.Duration(d, &h.SessionLifetime)
		case "idle_timeout":
			err = cfarg.Duration(d, &h.IdleTimeout)
		case "cookie_name":
			err = cfarg.String(d, &h.CookieName)
		case "console_key":
			err = cfarg.String(d, &h.ConsoleKey)
		case "site_name":
			err = cfarg.String(d, &h.SiteName)
		case "support_grant_limit":
			var s string
			if err = cfarg.String(d, &s); err == nil {
				if h.SupportGrantLimit, err = strconv.ParseInt(s, 10, 64); err != nil {
					return d.Errf("support_grant_limit: %q is not a whole number", s)
				}
			}
		default:
			return d.Errf("unknown subdirective %q", name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Handler)(nil)
