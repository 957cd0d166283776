package account

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-textgen/textgen/caddymodule/internal/cfarg"
	"github.com/caddy-textgen/textgen/caddymodule/internal/webarea"
)

func init() { webarea.RegisterDirective[Handler]("textgen_account") }

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens.
//
// Syntax:
//
//	textgen_account [<matcher>] {
//		ledger                <dir>
//		limits_store          <redis-url>
//		path_prefix           <path>
//		session_lifetime      <duration>
//		cookie_name           <name>
//		stripe_secret_key     <key>      # e.g. {env.STRIPE_SECRET_KEY}
//		stripe_webhook_secret <secret>   # e.g. {env.STRIPE_WEBHOOK_SECRET}
//		stripe_api_url        <url>
//		webhook_tolerance     <duration>
//		package               <id> <credits> <price_cents> [expires <duration>]
//		public_url            <url>
//		test_credits          <n>
//		signup_credits        <n>        # live credits a new account gets once its address is confirmed
//		site_name             <name>
//		max_keys              <n>
//		invoice_creation                 # Stripe invoices for purchases
//		tax_id_collection                # customers may enter a tax ID
//		smtp {                           # e-mail (mail_caddyfile.go)
//			host     <host>
//			port     <port>
//			security starttls|tls|none
//			username <user>              # e.g. {env.SMTP_USER}
//			password <password>          # e.g. {env.SMTP_PASSWORD}
//			from     <address>           # e.g. "Text API <no-reply@example.com>"
//			timeout  <duration>
//		}
//		mail_templates        <dir>
//		mail_key              <base64>   # e.g. {env.TEXTGEN_MAIL_KEY}
//		operator_email        <address>  # gets an e-mail about every new dispute (needs smtp)
//		refuse_disputed_purchases        # no Checkout for an account with an open or lost dispute
//		top_up                on|off     # automatic top-up with a saved card (default off)
//		alerts off                       # no alerts to the accounts' own endpoints
//		alerts {                         # alerts (alerts.go); on by default
//			allow_private_endpoints      # endpoints on private and loopback addresses too
//		}
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return webarea.ParseBlock(d, h.settings(), []string{"package"}, func(name string) (bool, error) {
		var err error
		switch name {
		case "stripe_secret_key":
			err = cfarg.String(d, &h.StripeSecretKey)
		case "stripe_webhook_secret":
			err = cfarg.String(d, &h.StripeWebhookSecret)
		case "stripe_api_url":
			err = cfarg.String(d, &h.StripeAPIURL)
		case "webhook_tolerance":
			err = cfarg.Duration(d, &h.WebhookTolerance)
		case "public_url":
			err = cfarg.String(d, &h.PublicURL)
		case "test_credits":
			err = wholeNumber(d, name, &h.TestCredits)
		case "signup_credits":
			err = wholeNumber(d, name, &h.SignupCredits)
		case "max_keys":
			var n int64
			if err = wholeNumber(d, name, &n); err == nil {
				h.MaxKeys = int(n)
			}
		case "invoice_creation":
			err = flag(d, name, &h.InvoiceCreation)
		case "tax_id_collection":
			err = flag(d, name, &h.TaxIDCollection)
		case "smtp":
			h.SMTP = new(SMTP)
			err = h.SMTP.unmarshalCaddyfile(d)
		case "mail_templates":
			err = cfarg.String(d, &h.MailTemplates)
		case "mail_key":
			err = cfarg.String(d, &h.MailKey)
		case "operator_email":
			err = cfarg.String(d, &h.OperatorEmail)
		case "refuse_disputed_purchases":
			err = flag(d, name, &h.RefuseDisputedPurchases)
		case "top_up":
			if err = cfarg.String(d, &h.TopUp); err == nil && h.TopUp != "on" && h.TopUp != "off" {
				err = d.Errf("top_up: want on or off, got %q", h.TopUp)
			}
		case "alerts":
			h.Alerts = new(Alerts)
			err = h.Alerts.unmarshalCaddyfile(d)
		case "package":
			err = h.parsePackage(d)
		default:
			return false, nil
		}
		return true, err
	})
}

// parsePackage reads `package <id> <credits> <price_cents> [expires <duration>]`.
func (h *Handler) parsePackage(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) != 3 && (len(args) != 5 || args[3] != "expires") {
		return d.Errf("package: want <id> <credits> <price_cents> [expires <duration>], got %q", args)
	}
	p := Package{ID: args[0]}
	var err error
	if p.Credits, err = strconv.ParseInt(args[1], 10, 64); err != nil {
		return d.Errf("package %s: credits %q is not a whole number", args[0], args[1])
	}
	if p.PriceCents, err = strconv.ParseInt(args[2], 10, 64); err != nil {
		return d.Errf("package %s: price %q is not a whole number of cents", args[0], args[2])
	}
	if len(args) == 5 {
		dur, err := caddy.ParseDuration(args[4])
		if err != nil || dur <= 0 {
			return d.Errf("package %s: expires %q is not a duration such as 365d or 720h", args[0], args[4])
		}
		p.Expires = caddy.Duration(dur)
	}
	h.Packages = append(h.Packages, p)
	return nil
}

// wholeNumber reads a subdirective's one argument, a whole number.
func wholeNumber(d *caddyfile.Dispenser, name string, dst *int64) error {
	var s string
	if err := cfarg.String(d, &s); err != nil {
		return err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return d.Errf("%s: %q is not a whole number", name, s)
	}
	*dst = n
	return nil
}

// flag sets a subdirective that takes no argument.
func flag(d *caddyfile.Dispenser, name string, dst *bool) error {
	if d.NextArg() {
		return d.Errf("%s takes no argument", name)
	}
	*dst = true
	return nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Handler)(nil)
