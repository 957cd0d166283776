// Package account is "My Account", the self-service area of caddy-textgen in the browser: the
// Caddy HTTP handler http.handlers.textgen_account (Caddyfile directive textgen_account). Account
// holders sign up, log in, create and revoke API keys, see their credits, requests and
// purchases, refill their test credits, and buy credit packages through Stripe Checkout, whose
// webhook credits the purchase exactly once. It shares the ledger with the generate handler
// through the plugin's ledger pool.
package account

import (
	"cmp"
	"fmt"
	"net/http"
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/caddymodule/internal/webarea"
	"github.com/caddy-textgen/textgen/ledger"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler serves the account area under PathPrefix and passes every other request on to the
// next handler, so it works in a site block next to textgen without a matcher.
type Handler struct {
	// Ledger is the ledger the textgen handler names (a Badger directory or a postgres:// URL).
	// Required. Both handlers share one open database.
	Ledger string `json:"ledger,omitempty"`
	// LimitsStore keeps the log-in and sign-up throttles in Redis, shared by every instance
	// that names the same store and ledger (the textgen handler's limits_store). Default: each
	// instance's memory (and a reload starts them afresh).
	LimitsStore string `json:"limits_store,omitempty"`

	// PathPrefix is where the account area lives. Default: /account.
	PathPrefix string `json:"path_prefix,omitempty"`

	// SessionLifetime is how long a log-in lasts (absolute, not extended by activity).
	// Default: 12h.
	SessionLifetime caddy.Duration `json:"session_lifetime,omitempty"`

	// CookieName names the session cookie; the log-in form's CSRF cookie is the same name with
	// "_csrf" appended. Default: textgen_session.
	CookieName string `json:"cookie_name,omitempty"`

	// StripeSecretKey is the Stripe API secret key (sk_live_... or sk_test_...). Placeholders
	// such as {env.STRIPE_SECRET_KEY} are resolved at start. Default: none; without it (and
	// the webhook secret) buying credits is switched off and the pages say so.
	StripeSecretKey string `json:"stripe_secret_key,omitempty"`

	// StripeWebhookSecret is the signing secret (whsec_...) of the webhook endpoint registered
	// in Stripe for PathPrefix + "/stripe/webhook". Placeholders are resolved at start.
	// Required when StripeSecretKey is set.
	StripeWebhookSecret string `json:"stripe_webhook_secret,omitempty"`

	// StripeAPIURL is the base URL of the Stripe API. Default: https://api.stripe.com (tests
	// point it at stripe-mock).
	StripeAPIURL string `json:"stripe_api_url,omitempty"`

	// WebhookTolerance is how old a webhook's signed timestamp may be. Default: 5m (Stripe's).
	WebhookTolerance caddy.Duration `json:"webhook_tolerance,omitempty"`

	// Packages are the credit packages on sale, in the order shown. Default: one package "10"
	// of 10 credits for 200 cents (2.00 EUR).
	Packages []Package `json:"packages,omitempty"`

	// PublicURL is the scheme and host customers reach the site at (https://api.example.com),
	// used for Stripe's return links. Default: taken from each request (its Host header and
	// whether it came over TLS); set it when Caddy sits behind another proxy.
	PublicURL string `json:"public_url,omitempty"`

	// TestCredits is the number of test credits a refill tops the account up to. Default: 50.
	TestCredits int64 `json:"test_credits,omitempty"`

	// SignupCredits is the number of live credits an account made through the sign-up form
	// gets, once, when its e-mail address is confirmed (at sign-up without smtp, where every
	// sign-up counts as confirmed). The grant's reference is unique to the account, so it is
	// never given twice. Default: 0 (none): live credits are bought or granted by the operator.
	SignupCredits int64 `json:"signup_credits,omitempty"`

	// SiteName is shown in page titles and the header. Default: "Text generation API".
	SiteName string `json:"site_name,omitempty"`

	// MaxKeys is the most unrevoked API keys an account may have. Default: 20.
	MaxKeys int `json:"max_keys,omitempty"`

	// InvoiceCreation has Stripe Checkout create a Stripe invoice for every paid purchase
	// (Stripe's invoice_creation; Stripe charges for it). Default: off.
	InvoiceCreation bool `json:"invoice_creation,omitempty"`

	// TaxIDCollection lets customers enter a tax ID (VAT number) in Stripe Checkout, which
	// Stripe puts on the invoice (Stripe's tax_id_collection). Default: off.
	TaxIDCollection bool `json:"tax_id_collection,omitempty"`

	// SMTP is the server that sends the account area's e-mail: address verification,
	// password reset, invitations, low-balance alerts, refunds and, to operator_email, new
	// disputes (mail.go). Default: none; then no
	// e-mail is sent, sign-ups count as verified, and password reset is off (the pages say
	// so). Needs public_url, for the links in the messages.
	SMTP *SMTP `json:"smtp,omitempty"`

	// MailTemplates is a directory whose files replace the built-in e-mail templates of the
	// same name (verify, reset, invite, low_balance, refund, dispute; .txt and .html). Default:
	// the built-in ones.
	MailTemplates string `json:"mail_templates,omitempty"`

	// MailKey seals queued e-mail, which carries live links (32 bytes in base64: openssl rand
	// -base64 32); placeholders are resolved at start. Instances sharing a PostgreSQL ledger
	// set the same one. Default: the key file textgen/retention.key in Caddy's data directory,
	// the one kept generations use.
	MailKey string `json:"mail_key,omitempty"`

	// OperatorEmail is the address that gets an e-mail about every new dispute (chargeback) of
	// a purchase, with its id, reason, amount and account. Needs smtp. Default: none (the dispute
	// is logged at warning level, and listed by caddy textgen payments list).
	OperatorEmail string `json:"operator_email,omitempty"`

	// RefuseDisputedPurchases refuses new Checkout purchases from an account that has an open
	// or lost dispute, with a message that says why and whom to ask. Default: off (a disputed
	// account may buy again; the credits of the disputed purchase are taken off either way).
	RefuseDisputedPurchases bool `json:"refuse_disputed_purchases,omitempty"`

	// TopUp turns automatic top-up on ("on") or off ("off", the default): an account's owner
	// saves a card and a rule, and a package is bought with the card when the account's credits
	// fall under the rule's threshold (topup.go). Needs Stripe, and the webhook endpoint's
	// payment_intent.succeeded, payment_intent.payment_failed and
	// payment_intent.requires_action events. Off by default because a top-up is credited only
	// by payment_intent.succeeded: an endpoint registered for purchases alone would charge cards
	// and credit nothing.
	TopUp string `json:"top_up,omitempty"`

	// Alerts configures the alerts an account sends to its own HTTPS endpoints (alerts.go):
	// off, or on private addresses too. Default: on, public addresses only. The endpoints'
	// signing secrets are sealed with mail_key (or its key file).
	Alerts *Alerts `json:"alerts,omitempty"`

	logger *zap.Logger
	// area is the running area: its shares of the ledger and limits store, its pages once the
	// textgen app has started (internal/webarea).
	area *webarea.Area
}

// Package is a credit package on sale. The price is in euro cents.
type Package struct {
	// ID names the package in forms and in the Checkout Session's metadata. Letters, digits,
	// "-" and "_"; required.
	ID string `json:"id,omitempty"`
	// Credits bought with the package; required, > 0.
	Credits int64 `json:"credits,omitempty"`
	// PriceCents is the price in euro cents; required, at least 50 (Stripe's minimum charge).
	PriceCents int64 `json:"price_cents,omitempty"`
	// Expires is how long the credits bought last (e.g. 365d): what is left of them then
	// expires, and they are spent before credits that expire later or never. Default: 0, never.
	Expires caddy.Duration `json:"expires,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.textgen_account",
		New: func() caddy.Module { return new(Handler) },
	}
}

const (
	defaultPrefix           = "/account"
	defaultSessionLifetime  = 12 * time.Hour
	defaultCookieName       = "textgen_session"
	defaultWebhookTolerance = 5 * time.Minute
	defaultTestCredits      = 50
	defaultSiteName         = "Text generation API"
	defaultMaxKeys          = 20
)

// DefaultPackages is the one package sold when the Caddyfile names none: 10 credits for 2.00 EUR.
var DefaultPackages = []Package{{ID: "10", Credits: 10, PriceCents: 200}}

var packageIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

// settings are the settings every web area has, with My Account's defaults.
func (h *Handler) settings() webarea.Settings {
	return webarea.Settings{Module: "textgen_account", Ledger: &h.Ledger, LimitsStore: &h.LimitsStore,
		PathPrefix: &h.PathPrefix, SessionLifetime: &h.SessionLifetime, CookieName: &h.CookieName, SiteName: &h.SiteName,
		Default: webarea.Defaults{PathPrefix: defaultPrefix, SessionLifetime: defaultSessionLifetime,
			CookieName: defaultCookieName, SiteName: defaultSiteName}}
}

// Provision sets defaults, resolves the Stripe secrets and joins the ledger, which the textgen
// app opens in its Start (never called by `caddy validate`).
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.WebhookTolerance = cmp.Or(h.WebhookTolerance, caddy.Duration(defaultWebhookTolerance))
	if len(h.Packages) == 0 {
		h.Packages = append([]Package(nil), DefaultPackages...)
	}
	h.TestCredits = cmp.Or(h.TestCredits, defaultTestCredits)
	h.MaxKeys = cmp.Or(h.MaxKeys, defaultMaxKeys)
	// No HoldTTL on the ledger: My Account holds no credits, and every hold the generate
	// handler makes carries that handler's own hold_ttl, whoever opened the shared ledger.
	var err error
	if h.area, err = webarea.Provision(ctx, h.settings(), h.Validate); err != nil {
		return err
	}
	// Secrets come from the environment ({env.STRIPE_SECRET_KEY}), resolved once here so that
	// they never appear in the config JSON.
	repl := caddy.NewReplacer()
	secretKey := strings.TrimSpace(repl.ReplaceAll(h.StripeSecretKey, ""))
	webhookSecret := strings.TrimSpace(repl.ReplaceAll(h.StripeWebhookSecret, ""))
	if (secretKey == "") != (webhookSecret == "") {
		return fmt.Errorf("textgen_account: stripe_secret_key and stripe_webhook_secret must both be set (after resolving placeholders) or both be empty")
	}
	if secretKey == "" {
		h.logger.Warn("buying credits is switched off: no stripe_secret_key / stripe_webhook_secret")
	}
	if h.SignupCredits > 0 && h.SMTP == nil {
		h.logger.Warn("signup_credits without smtp: every sign-up counts as confirmed and gets its live credits at once; keep this to a site on your own machine",
			zap.Int64("signup_credits", h.SignupCredits))
	}

	// The API's 402 names this area (textgen_account's own address when it has public_url,
	// else its path on the site) and, when buying is on, the packages it sells.
	area := textgenapp.AccountArea{Where: strings.TrimRight(h.PublicURL, "/") + h.PathPrefix + "/", SiteName: h.SiteName}
	if secretKey != "" {
		for _, p := range h.Packages {
			area.Packages = append(area.Packages, fmt.Sprintf("%d credits = %d.%02d EUR", p.Credits, p.PriceCents/100, p.PriceCents%100))
		}
	}
	h.area.App.SetAccountArea(h.area.Ledger.Key(), area)
	cfg := appConfig{
		limits:           h.area.Limits,
		limitsName:       h.area.Ledger.Key(),
		logger:           h.logger,
		prefix:           h.PathPrefix,
		sessionLifetime:  time.Duration(h.SessionLifetime),
		cookieName:       h.CookieName,
		stripeKey:        secretKey,
		webhookSecret:    webhookSecret,
		stripeAPIURL:     h.StripeAPIURL,
		webhookTolerance: time.Duration(h.WebhookTolerance),
		packages:         h.Packages,
		publicURL:        strings.TrimRight(h.PublicURL, "/"),
		testCredits:      h.TestCredits,
		signupCredits:    h.SignupCredits,
		siteName:         h.SiteName,
		maxKeys:          h.MaxKeys,
		invoiceCreation:  h.InvoiceCreation,
		taxIDCollection:  h.TaxIDCollection,
		operatorEmail:    h.OperatorEmail,
		refuseDisputed:   h.RefuseDisputedPurchases,
		topUp:            h.TopUp == "on",
		prices:           func() []textgenapp.ToolPrice { return h.area.App.ToolPrices(h.area.Ledger.Key()) },
	}
	smtp, err := h.provisionSMTP(repl)
	if err != nil {
		return err
	}
	h.area.OnStart(func(store ledger.Store) (http.Handler, func(), error) {
		cfg.store = store
		if smtp != nil {
			mail, err := h.startMailer(*smtp)
			if err != nil {
				return nil, nil, err
			}
			cfg.mail = mail
		}
		if h.Alerts == nil || !h.Alerts.Off {
			al, err := h.startAlerter()
			switch {
			case err != nil && h.Alerts == nil:
				// On by default: a site that never asked for alerts starts without them rather
				// than not at all.
				h.logger.Error("alerts to the accounts' own endpoints are off: their key cannot be loaded", zap.Error(err))
			case err != nil:
				return nil, nil, err
			default:
				cfg.alerts = al
			}
		}
		a, err := newApp(cfg)
		if err != nil {
			return nil, nil, err
		}
		// The admin API's invitations (invite.go) and refunds (refund.go) of this ledger.
		unregisterInviter := textgenapp.RegisterInviter(store, a)
		unregisterAlerts := func() {}
		if a.alerts != nil {
			unregisterAlerts = textgenapp.RegisterAlertEndpoints(store, a)
		}
		unregisterRefunder, unregisterWatcher := func() {}, func() {}
		if a.stripe != nil {
			unregisterRefunder = textgenapp.RegisterRefunder(store, a)
		}
		if a.topUps != nil {
			// The textgen handler of this ledger tells it of live holds (topup.go).
			unregisterWatcher = textgenapp.RegisterTopUpWatcher(store, a)
		}
		return a, func() {
			unregisterWatcher()
			unregisterInviter()
			unregisterAlerts()
			unregisterRefunder()
			a.close()
		}, nil
	})
	return nil
}

// Validate rejects a configuration that cannot work, naming the field.
func (h *Handler) Validate() error {
	if err := h.settings().Validate(); err != nil {
		return err
	}
	if h.TopUp != "" && h.TopUp != "on" && h.TopUp != "off" {
		return fmt.Errorf("textgen_account: top_up must be on or off, not %q", h.TopUp)
	}
	if h.WebhookTolerance < 0 {
		return fmt.Errorf("textgen_account: webhook_tolerance must not be negative")
	}
	seen := map[string]bool{}
	for _, p := range h.Packages {
		if !packageIDRe.MatchString(p.ID) {
			return fmt.Errorf("textgen_account: package %q: the id may hold only letters, digits, - and _", p.ID)
		}
		if seen[p.ID] {
			return fmt.Errorf("textgen_account: package %q is defined twice", p.ID)
		}
		seen[p.ID] = true
		if p.Credits <= 0 || p.Credits > 1_000_000 {
			return fmt.Errorf("textgen_account: package %q: credits must be between 1 and 1000000", p.ID)
		}
		if p.PriceCents < 50 || p.PriceCents > 99_999_999 {
			return fmt.Errorf("textgen_account: package %q: the price must be between 50 and 99999999 cents", p.ID)
		}
		if p.Expires < 0 || (p.Expires > 0 && time.Duration(p.Expires) < time.Hour) {
			return fmt.Errorf("textgen_account: package %q: expires must be at least an hour, or 0 for never", p.ID)
		}
	}
	if h.PublicURL != "" {
		u, err := url.Parse(h.PublicURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("textgen_account: public_url: %q must be a scheme and host like https://api.example.com", h.PublicURL)
		}
	}
	if h.StripeAPIURL != "" {
		if u, err := url.Parse(h.StripeAPIURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("textgen_account: stripe_api_url: %q is not an http(s) URL", h.StripeAPIURL)
		}
	}
	if h.TestCredits < 0 || h.TestCredits > 10_000 {
		return fmt.Errorf("textgen_account: test_credits must be between 0 and 10000")
	}
	if h.SignupCredits < 0 || h.SignupCredits > 1_000_000 {
		return fmt.Errorf("textgen_account: signup_credits must be between 0 and 1000000")
	}
	if h.MaxKeys < 0 {
		return fmt.Errorf("textgen_account: max_keys must not be negative")
	}
	if h.OperatorEmail != "" {
		if _, err := mail.ParseAddress(h.OperatorEmail); err != nil {
			return fmt.Errorf("textgen_account: operator_email: %q is not an e-mail address: %v", h.OperatorEmail, err)
		}
		if h.SMTP == nil {
			return fmt.Errorf("textgen_account: operator_email needs smtp: without it no e-mail is sent")
		}
	}
	if h.SMTP != nil {
		if err := h.SMTP.Validate(); err != nil {
			return err
		}
		if h.PublicURL == "" {
			return fmt.Errorf("textgen_account: public_url is required with smtp: the links in e-mails need the site's address")
		}
	}
	return nil
}

// Cleanup stops the e-mail sender and gives back the shared ledger once the last request of
// this config has ended. It is safe after a Provision that failed half way.
func (h *Handler) Cleanup() error {
	return h.area.Cleanup()
}

// ServeHTTP serves the account area under PathPrefix and passes other paths on.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	return h.area.ServeHTTP(w, r, next)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
