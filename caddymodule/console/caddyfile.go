package console

import (
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-textgen/textgen/caddymodule/internal/cfarg"
	"github.com/caddy-textgen/textgen/caddymodule/internal/webarea"
)

func init() { webarea.RegisterDirective[Handler]("textgen_console") }

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
	return webarea.ParseBlock(d, h.settings(), nil, func(name string) (bool, error) {
		switch name {
		case "idle_timeout":
			return true, cfarg.Duration(d, &h.IdleTimeout)
		case "console_key":
			return true, cfarg.String(d, &h.ConsoleKey)
		case "support_grant_limit":
			var s string
			err := cfarg.String(d, &s)
			if err == nil {
				if h.SupportGrantLimit, err = strconv.ParseInt(s, 10, 64); err != nil {
					return true, d.Errf("support_grant_limit: %q is not a whole number", s)
				}
			}
			return true, err
		}
		return false, nil
	})
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Handler)(nil)
