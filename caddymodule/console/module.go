// Package console is the operator's web console of caddy-textgen: the Caddy HTTP handler
// http.handlers.textgen_console (Caddyfile directive textgen_console). Operators log in with a
// password and a TOTP code (or a single-use recovery code), see the service's accounts,
// payments and usage, and act on them within their role: viewer (reads), support (notes,
// grants and adjustments up to support_grant_limit) and owner (also disable/enable, refunds).
// Every action that changes money or access is written to the ledger's audit log, with the
// note the operator must give, before it is made; each action is the same function the admin
// API and the CLI call (caddymodule/operator), so the three can never disagree.
package console

import (
	"cmp"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/caddymodule/internal/webarea"
	"github.com/caddy-textgen/textgen/ledger"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler serves the console under PathPrefix and passes every other request on, so it can
// share a site block with textgen and textgen_account, or have a host of its own.
type Handler struct {
	// Ledger is the ledger the textgen handler names (a Badger directory or a postgres:// URL).
	// Required.
	Ledger string `json:"ledger,omitempty"`
	// LimitsStore keeps the log-in throttles in Redis, shared by every instance that names the
	// same store and ledger. Default: each instance's memory.
	LimitsStore string `json:"limits_store,omitempty"`
	// PathPrefix is where the console lives. Default: /console.
	PathPrefix string `json:"path_prefix,omitempty"`
	// SessionLifetime is the longest a log-in lasts, however active. Default: 8h.
	SessionLifetime caddy.Duration `json:"session_lifetime,omitempty"`
	// IdleTimeout ends a session that made no request for this long. Default: 30m.
	IdleTimeout caddy.Duration `json:"idle_timeout,omitempty"`
	// CookieName names the session cookie; the log-in form's CSRF cookie is the same name with
	// "_csrf" appended. Default: textgen_console.
	CookieName string `json:"cookie_name,omitempty"`
	// ConsoleKey seals the operators' TOTP secrets (32 bytes in base64: openssl rand -base64
	// 32); placeholders are resolved at start. Instances sharing a PostgreSQL ledger set the
	// same one. Default: the key file textgen/console.key in Caddy's data directory, made once.
	ConsoleKey string `json:"console_key,omitempty"`
	// SupportGrantLimit is the most credits an operator of role support may grant, or add or
	// take off by an adjustment, in one action. Default: 100.
	SupportGrantLimit int64 `json:"support_grant_limit,omitempty"`
	// SiteName is shown in page titles and the header. Default: the site_name of My Account
	// (textgen_account) on the same ledger, else "Text generation API".
	SiteName string `json:"site_name,omitempty"`

	logger *zap.Logger
	// area is the running console: its shares of the ledger and limits store, its pages once
	// the textgen app has started (internal/webarea).
	area *webarea.Area
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.textgen_console",
		New: func() caddy.Module { return new(Handler) },
	}
}

const (
	defaultPrefix            = "/console"
	defaultSessionLifetime   = 8 * time.Hour
	defaultIdleTimeout       = 30 * time.Minute
	defaultCookieName        = "textgen_console"
	defaultSupportGrantLimit = 100
	defaultSiteName          = "Text generation API"
)

// settings are the settings every web area has, with the console's defaults.
func (h *Handler) settings() webarea.Settings {
	return webarea.Settings{Module: "textgen_console", Ledger: &h.Ledger, LimitsStore: &h.LimitsStore,
		PathPrefix: &h.PathPrefix, SessionLifetime: &h.SessionLifetime, CookieName: &h.CookieName, SiteName: &h.SiteName,
		Default: webarea.Defaults{PathPrefix: defaultPrefix, SessionLifetime: defaultSessionLifetime,
			CookieName: defaultCookieName, SiteName: defaultSiteName}}
}

// Provision sets defaults and joins the ledger; the key and the app are made at start.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.IdleTimeout = cmp.Or(h.IdleTimeout, caddy.Duration(defaultIdleTimeout))
	h.SupportGrantLimit = cmp.Or(h.SupportGrantLimit, defaultSupportGrantLimit)
	ownName := h.SiteName != ""
	var err error
	if h.area, err = webarea.Provision(ctx, h.settings(), h.Validate); err != nil {
		return err
	}
	cfg := appConfig{
		limits:            h.area.Limits,
		limitsName:        h.area.Ledger.Key() + "|console",
		logger:            h.logger,
		prefix:            h.PathPrefix,
		sessionLifetime:   time.Duration(h.SessionLifetime),
		idleTimeout:       time.Duration(h.IdleTimeout),
		cookieName:        h.CookieName,
		supportGrantLimit: h.SupportGrantLimit,
		siteName:          h.SiteName,
	}
	h.area.OnStart(func(store ledger.Store) (http.Handler, func(), error) {
		sealer, err := h.key()
		if err != nil {
			return nil, nil, err
		}
		cfg.store, cfg.sealer = store, sealer
		// Without a site_name of its own, the console is named as My Account of the same ledger
		// (known once every handler is provisioned).
		if n := h.area.App.AccountArea(h.area.Ledger.Key()).SiteName; !ownName && n != "" {
			cfg.siteName = n
		}
		// The admin API's `operator create` seals with this key (textgenapp/console.go).
		return newApp(cfg), textgenapp.RegisterConsoleSealer(store, sealer), nil
	})
	return nil
}

// key loads the console key (console_key, else the key file in Caddy's data directory). It
// runs in the textgen app's Start, which `caddy validate` never calls.
func (h *Handler) key() (*sealing.Sealer, error) {
	key, err := sealing.Key{Setting: "console_key", Value: h.ConsoleKey, File: "console.key",
		User: "textgen_console", Seals: "TOTP secrets"}.Load(h.logger, textgenapp.LedgerShared(h.Ledger))
	if err != nil {
		return nil, err
	}
	return sealing.New(key)
}

// Validate rejects a configuration that cannot work, naming the field.
func (h *Handler) Validate() error {
	if err := h.settings().Validate(); err != nil {
		return err
	}
	if h.IdleTimeout < 0 {
		return fmt.Errorf("textgen_console: idle_timeout must not be negative")
	}
	if h.SupportGrantLimit < 0 || h.SupportGrantLimit > 1_000_000_000 {
		return fmt.Errorf("textgen_console: support_grant_limit must be between 0 and 1000000000")
	}
	return nil
}

// Cleanup gives back the shared ledger once the last request of this config has ended. It is
// safe after a Provision that failed half way.
func (h *Handler) Cleanup() error {
	return h.area.Cleanup()
}

// ServeHTTP serves the console under PathPrefix and passes other paths on.
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
