package account

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("textgen_account", parseCaddyfile)
	// Right after copy_response, which puts it just before textgen (textgen registers itself
	// before respond, and its package initialises first because this one imports it): the
	// account area sees its own paths first even when textgen has no matcher. Only standard
	// directives may be named here, so textgen itself cannot be.
	httpcaddyfile.RegisterDirectiveOrder("textgen_account", httpcaddyfile.After, "copy_response")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var a Handler
	err := a.UnmarshalCaddyfile(h.Dispenser)
	return &a, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens.
//
// Syntax:
//
//	textgen_account [<matcher>] {
//		ledger                <dir>
//		path_prefix           <path>
//		session_lifetime      <duration>
//		cookie_name           <name>
//		stripe_secret_key     <key>      # e.g. {env.STRIPE_SECRET_KEY}
//		stripe_webhook_secret <secret>   # e.g. {env.STRIPE_WEBHOOK_SECRET}
//		stripe_api_url        <url>
//		webhook_tolerance     <duration>
//		package               <id> <credits> <price_cents>
//		public_url            <url>
//		test_credits          <n>
//		site_name             <name>
//		max_keys              <n>
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if name != "package" {
			if seen[name] {
				return d.Errf("%s specified more than once", name)
			}
			seen[name] = true
		}
		var err error
		switch name {
		case "ledger":
			err = oneString(d, &h.Ledger)
		case "path_prefix":
			err = oneString(d, &h.PathPrefix)
		case "session_lifetime":
			err = oneDuration(d, &h.SessionLifetime)
		case "cookie_name":
			err = oneString(d, &h.CookieName)
		case "stripe_secret_key":
			err = oneString(d, &h.StripeSecretKey)
		case "stripe_webhook_secret":
			err = oneString(d, &h.StripeWebhookSecret)
		case "stripe_api_url":
			err = oneString(d, &h.StripeAPIURL)
		case "webhook_tolerance":
			err = oneDuration(d, &h.WebhookTolerance)
		case "public_url":
			err = oneString(d, &h.PublicURL)
		case "site_name":
			err = oneString(d, &h.SiteName)
		case "test_credits":
			var s string
			if err = oneString(d, &s); err == nil {
				h.TestCredits, err = strconv.ParseInt(s, 10, 64)
				if err != nil {
					return d.Errf("test_credits: %q is not a whole number", s)
				}
			}
		case "max_keys":
			var s string
			if err = oneString(d, &s); err == nil {
				h.MaxKeys, err = strconv.Atoi(s)
				if err != nil {
					return d.Errf("max_keys: %q is not a whole number", s)
				}
			}
		case "package":
			args := d.RemainingArgs()
			if len(args) != 3 {
				return d.Errf("package: want <id> <credits> <price_cents>, got %d arguments", len(args))
			}
			p := Package{ID: args[0]}
			if p.Credits, err = strconv.ParseInt(args[1], 10, 64); err != nil {
				return d.Errf("package %s: credits %q is not a whole number", args[0], args[1])
			}
			if p.PriceCents, err = strconv.ParseInt(args[2], 10, 64); err != nil {
				return d.Errf("package %s: price %q is not a whole number of cents", args[0], args[2])
			}
			h.Packages = append(h.Packages, p)
		default:
			return d.Errf("unknown subdirective %q", name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

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

func oneDuration(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	var s string
	if err := oneString(d, &s); err != nil {
		return err
	}
	v, err := caddy.ParseDuration(s)
	if err != nil {
		return d.Errf("%q is not a duration: %v", s, err)
	}
	*dst = caddy.Duration(v)
	return nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Handler)(nil)
