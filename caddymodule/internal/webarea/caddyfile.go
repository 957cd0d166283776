package webarea

import (
	"slices"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-textgen/textgen/caddymodule/internal/cfarg"
)

// ParseBlock reads a web area's directive: no argument after its name, then a block in which
// each subdirective is given once (but those named in repeatable). The subdirectives every
// area has are read into s; own reads the area's others and returns false for a name it does
// not know, which is refused.
func ParseBlock(d *caddyfile.Dispenser, s Settings, repeatable []string, own func(name string) (known bool, err error)) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if !slices.Contains(repeatable, name) {
			if seen[name] {
				return d.Errf("%s specified more than once", name)
			}
			seen[name] = true
		}
		known, err := s.parse(d, name)
		if !known {
			known, err = own(name)
		}
		if !known {
			return d.Errf("unknown subdirective %q", name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// parse reads one of the subdirectives every area has; known is false for any other.
func (s Settings) parse(d *caddyfile.Dispenser, name string) (known bool, err error) {
	switch name {
	case "ledger":
		return true, cfarg.String(d, s.Ledger)
	case "limits_store":
		return true, cfarg.String(d, s.LimitsStore)
	case "path_prefix":
		return true, cfarg.String(d, s.PathPrefix)
	case "session_lifetime":
		return true, cfarg.Duration(d, s.SessionLifetime)
	case "cookie_name":
		return true, cfarg.String(d, s.CookieName)
	case "site_name":
		return true, cfarg.String(d, s.SiteName)
	}
	return false, nil
}

// RegisterDirective registers the Caddyfile directive of a web area whose handler is *H, read
// by its UnmarshalCaddyfile, and orders it right after copy_response. textgen registers itself
// before respond, which follows copy_response, so the area comes before textgen whichever
// registers first, and sees its own paths even when textgen has no matcher. (Only standard
// directives may be named in an order, so textgen itself cannot be.)
func RegisterDirective[H any, PH interface {
	*H
	caddyhttp.MiddlewareHandler
	caddyfile.Unmarshaler
}](name string) {
	httpcaddyfile.RegisterHandlerDirective(name, func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		var area PH = new(H)
		err := area.UnmarshalCaddyfile(h.Dispenser)
		return area, err
	})
	httpcaddyfile.RegisterDirectiveOrder(name, httpcaddyfile.After, "copy_response")
}
