package account

import (
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-textgen/textgen/caddymodule/internal/cfarg"
)

// unmarshalCaddyfile reads the smtp block of textgen_account (syntax in caddyfile.go).
func (s *SMTP) unmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.Errf("smtp takes a block, not %q", d.Val())
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if seen[name] {
			return d.Errf("smtp: %s specified more than once", name)
		}
		seen[name] = true
		var err error
		switch name {
		case "host":
			err = cfarg.String(d, &s.Host)
		case "port":
			var v string
			if err = cfarg.String(d, &v); err == nil {
				if s.Port, err = strconv.Atoi(v); err != nil {
					return d.Errf("smtp: port %q is not a number", v)
				}
			}
		case "security":
			err = cfarg.String(d, &s.Security)
		case "username":
			err = cfarg.String(d, &s.Username)
		case "password":
			err = cfarg.String(d, &s.Password)
		case "from":
			err = cfarg.String(d, &s.From)
		case "timeout":
			err = cfarg.Duration(d, &s.Timeout)
		default:
			return d.Errf("smtp: unknown subdirective %q", name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
