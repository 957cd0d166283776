package account

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v82"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/caddymodule/internal/webarea"
	"github.com/caddy-textgen/textgen/ledger"
)

// now is the account area's clock (session expiry); tests replace it instead of sleeping.
var now = time.Now

// appConfig is the Handler's configuration with every default and secret resolved.
type appConfig struct {
	store accountLedger
	// limits keeps the throttles in Redis (nil: in memory), named by limitsName (the ledger).
	limits           *ratelimit.Shared
	limitsName       string
	logger           *zap.Logger
	prefix           string
	sessionLifetime  time.Duration
	cookieName       string
	stripeKey        string
	webhookSecret    string
	stripeAPIURL     string
	webhookTolerance time.Duration
	packages         []Package
	publicURL        string
	testCredits      int64
	signupCredits    int64 // live credits granted once when a sign-up's address is confirmed (verify.go)
	siteName         string
	maxKeys          int
	invoiceCreation  bool // Stripe Checkout's invoice_creation (buy.go)
	taxIDCollection  bool // Stripe Checkout's tax_id_collection (buy.go)
	// httpClient is the client for the Stripe API. Default: one with a 30 s timeout.
	httpClient *http.Client
	// mail sends e-mail (mail.go); nil: no smtp, no e-mail.
	mail *mailer
	// alerts sends the account's alerts to its endpoints (alerts.go); nil: alerts are off.
	alerts *alerter
	// operatorEmail gets the notice of a new dispute ("": none is sent).
	operatorEmail string
	// refuseDisputed refuses Checkout to an account with an open or lost dispute (buy.go).
	refuseDisputed bool
	// prices are the tools of this ledger that do not cost 1 credit, as the textgen handlers
	// of the config set them (read at each page: they are provisioned in no set order).
	prices func() []textgenapp.ToolPrice
	// topUp turns automatic top-up on (top_up on; it also needs Stripe): topup.go.
	topUp bool
}

// app is the account area: its routes and everything they share. It is independent of Caddy's
// module lifecycle so that tests can build it on an in-memory ledger.
type app struct {
	appConfig
	stripe    *stripe.Client // nil: buying is switched off
	packageBy map[string]Package
	mux       *http.ServeMux
	pages     *pageSet
	origin    *http.CrossOriginProtection
	// Log-in throttles (loginLimit..., below): failed attempts per account and client address,
	// per client address, and per account from anywhere; sign-ups per client address.
	failByAccountAddr, failByIP, failByAccount, signupByIP *ratelimit.Buckets
	// Codes that cannot be redeemed, per account and per client address (redeem.go).
	redeemByAccount, redeemByIP *ratelimit.Buckets
	// slowLocks serialise the log-ins of an account whose failures from anywhere are over
	// loginLimitPerAccount (by a hash of its email): one slowed-down guess at a time.
	slowLocks [64]sync.Mutex
	// hashSlots bounds the argon2id hashes running at once (each takes 19 MiB).
	hashSlots chan struct{}
	// The throttles of the e-mail flows (flows.go).
	mailLimits
	// background is work a request leaves behind (reset.go, topup.go); close waits for it.
	background sync.WaitGroup
	// topUps is automatic top-up's state (topup.go); nil when it is off.
	topUps *topUpState
}

// The throttles of log-ins and sign-ups, token buckets as the API's rate limits are. Every
// attempt is counted before its password is checked (so attempts sent all at once are limited
// too) and refunded when it turns out not to count. As OWASP's authentication guidance asks,
// wrong passwords lock out the address that sends them, never the account's owner: failures
// from anywhere slow the account's log-ins down instead.
var (
	// loginLimitPerAccountAddress: 5 wrong passwords for one account from one client address at
	// once, then one every 15 minutes; a successful log-in from that address fills the bucket.
	loginLimitPerAccountAddress = ratelimit.Limit{Requests: 1, Window: 15 * time.Minute, Burst: 5}
	// loginLimitPerAccount: 20 failed log-ins of one account from anywhere in 15 minutes; past
	// it every log-in of the account waits slowDownDelay, one at a time, but is never refused.
	loginLimitPerAccount = ratelimit.Limit{Requests: 20, Window: 15 * time.Minute, Burst: 20}
	// loginLimitPerAddress: 30 failed log-ins from one client address, over any emails, then
	// 30 more every 15 minutes.
	loginLimitPerAddress = ratelimit.Limit{Requests: 30, Window: 15 * time.Minute, Burst: 30}
	// signupLimitPerAddress: 10 sign-ups an hour from one client address, "this email already
	// exists" answers included.
	signupLimitPerAddress = ratelimit.Limit{Requests: 10, Window: time.Hour, Burst: 10}
)

// slowDownDelay is the wait of each log-in of an account past loginLimitPerAccount.
const slowDownDelay = 2 * time.Second

// slowDown waits before a slowed-down log-in; tests replace it to count the waits.
var slowDown = func(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// throttleEntries bounds the identities each throttle remembers.
const throttleEntries = 100_000

const (
	maxWebhookBody = 1 << 20
	hashSlots      = 4
)

func newApp(c appConfig) (*app, error) {
	if c.httpClient == nil {
		c.httpClient = &http.Client{Timeout: 30 * time.Second}
	}
	a := &app{
		appConfig:         c,
		packageBy:         map[string]Package{},
		origin:            http.NewCrossOriginProtection(),
		failByAccountAddr: ratelimit.NewShared(c.limits, c.limitsName+"|login-account-address", loginLimitPerAccountAddress, throttleEntries),
		failByIP:          ratelimit.NewShared(c.limits, c.limitsName+"|login-address", loginLimitPerAddress, throttleEntries),
		failByAccount:     ratelimit.NewShared(c.limits, c.limitsName+"|login-account", loginLimitPerAccount, throttleEntries),
		signupByIP:        ratelimit.NewShared(c.limits, c.limitsName+"|signup-address", signupLimitPerAddress, throttleEntries),
		redeemByAccount:   ratelimit.NewShared(c.limits, c.limitsName+"|redeem-account", redeemLimitPerAccount, throttleEntries),
		redeemByIP:        ratelimit.NewShared(c.limits, c.limitsName+"|redeem-address", redeemLimitPerAddress, throttleEntries),
		hashSlots:         make(chan struct{}, hashSlots),
	}
	for _, p := range c.packages {
		a.packageBy[p.ID] = p
	}
	if c.stripeKey != "" {
		cfg := &stripe.BackendConfig{HTTPClient: c.httpClient, LeveledLogger: stripeLogger{c.logger.Named("stripe")}}
		if c.stripeAPIURL != "" {
			cfg.URL = stripe.String(c.stripeAPIURL)
		}
		a.stripe = stripe.NewClient(c.stripeKey, stripe.WithBackends(stripe.NewBackendsWithConfig(cfg)))
	}
	a.mailLimits = newMailLimits(c.limits, c.limitsName)
	var err error
	if a.pages, err = loadPages(); err != nil {
		return nil, err
	}
	a.routes()
	if a.mail != nil {
		a.startMail()
	}
	if a.stripe != nil && c.topUp {
		a.startTopUps()
	}
	if a.alerts != nil {
		a.startAlerts()
	}
	return a, nil
}

// close stops what the app runs in the background (the e-mail and alert senders).
func (a *app) close() {
	a.stopTopUps()
	a.background.Wait()
	a.stopMail()
	a.stopAlerts()
}

func (a *app) routes() {
	p := a.prefix
	m := http.NewServeMux()
	m.HandleFunc("GET "+p+"/assets/{name}", a.serveAsset)
	m.HandleFunc("GET "+p+"/{$}", a.authed(a.ownDashboard(a.dashboard)))
	m.HandleFunc("GET "+p, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, p+"/", http.StatusSeeOther)
	})
	m.HandleFunc("GET "+p+"/signup", a.signupForm)
	m.HandleFunc("POST "+p+"/signup", a.signup)
	m.HandleFunc("GET "+p+"/login", a.loginForm)
	m.HandleFunc("POST "+p+"/login", a.login)
	m.HandleFunc("POST "+p+"/logout", a.authedPost(a.logout))
	m.HandleFunc("GET "+p+"/keys", a.authed(a.keys))
	m.HandleFunc("POST "+p+"/keys", a.authedPost(a.verifiedFor(liveKeyRequest, a.createKey)))
	m.HandleFunc("GET "+p+"/keys/revoke", a.authed(a.revokeConfirm))
	m.HandleFunc("POST "+p+"/keys/revoke", a.authedPost(a.revokeKey))
	m.HandleFunc("GET "+p+"/keys/settings", a.authed(a.keySettings)) // key_limits.go
	m.HandleFunc("POST "+p+"/keys/settings", a.authedPost(a.saveKeySettings))
	m.HandleFunc("POST "+p+"/keys/roll", a.authedPost(a.rollKey))
	m.HandleFunc("POST "+p+"/test-credits", a.authedPost(a.needs(ledger.RoleAdmin, a.refillTestCredits)))
	m.HandleFunc("GET "+p+"/usage.csv", a.authed(a.needs(ledger.RoleAdmin, a.exportCSV)))
	m.HandleFunc("GET "+p+"/usage-by-key.csv", a.authed(a.needs(ledger.RoleAdmin, a.exportKeyUsageCSV)))
	m.HandleFunc("GET "+p+"/receipts/{reference}", a.authed(a.needs(ledger.RoleOwner, a.receipt)))
	m.HandleFunc("GET "+p+"/receipts/{reference}/signed", a.authed(a.needs(ledger.RoleOwner, a.signedReceipt)))
	m.HandleFunc("GET "+p+"/buy", a.authed(a.needs(ledger.RoleOwner, a.verifiedFor(always, a.buyPage))))
	m.HandleFunc("POST "+p+"/buy", a.authedPost(a.needs(ledger.RoleOwner, a.verifiedFor(always, a.buy))))
	m.HandleFunc("POST "+p+"/redeem", a.authedPost(a.needs(ledger.RoleOwner, a.verifiedFor(always, a.redeem)))) // redeem.go
	m.HandleFunc("GET "+p+"/buy/success", a.authed(a.needs(ledger.RoleOwner, a.buySuccess)))
	m.HandleFunc("GET "+p+"/buy/cancel", a.authed(a.needs(ledger.RoleOwner, a.buyCancel)))
	m.HandleFunc("GET "+p+"/topup", a.authed(a.needs(ledger.RoleOwner, a.verifiedFor(always, a.topUpPage)))) // topup_page.go
	m.HandleFunc("POST "+p+"/topup", a.authedPost(a.needs(ledger.RoleOwner, a.verifiedFor(always, a.saveTopUpRule))))
	m.HandleFunc("POST "+p+"/topup/card", a.authedPost(a.needs(ledger.RoleOwner, a.verifiedFor(always, a.saveCard))))
	m.HandleFunc("POST "+p+"/stripe/webhook", a.webhook)
	a.mailRoutes(m)
	a.alertRoutes(m) // alerts_page.go
	a.orgRoutes(m)
	m.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		a.errorPage(w, r, nil, http.StatusNotFound, "Page not found", "There is no page at this address.")
	})
	a.mux = m
}

// ServeHTTP serves one request of the account area.
func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Its own scripts; form-action allows https: for the redirect from "Buy" to Stripe Checkout
	// (browsers apply form-action to the redirects a form submission follows).
	webarea.SetPageHeaders(w.Header(), true, "'self' https:")
	a.mux.ServeHTTP(w, r)
}

// withHash runs f in one of the bounded argon2id slots, or gives up with the request.
func (a *app) withHash(ctx context.Context, f func()) error {
	select {
	case a.hashSlots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-a.hashSlots }()
	f()
	return nil
}

// internalError logs err and shows a 500 page that says nothing about it.
func (a *app) internalError(w http.ResponseWriter, r *http.Request, sc *sessionCtx, what string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	if errors.Is(err, ledger.ErrUnavailable) {
		// The ledger takes no new work for a while (its disk is nearly full, say); it has
		// logged why.
		w.Header().Set("Retry-After", "30")
		a.errorPage(w, r, sc, http.StatusServiceUnavailable, "Temporarily unavailable",
			"The service cannot take this request right now. Nothing was changed; please try again in a few minutes.")
		return
	}
	fields := []zap.Field{zap.Error(err), zap.String("path", r.URL.Path)}
	if sc != nil {
		fields = append(fields, zap.String("account", sc.acct.ID))
	}
	a.logger.Error(what, fields...)
	a.errorPage(w, r, sc, http.StatusInternalServerError, "Something went wrong",
		"The server could not complete this request. Nothing was changed that you have not been told about; please try again.")
}

// stripeLogger routes stripe-go's leveled logger into zap (it logs request errors at Error).
type stripeLogger struct{ l *zap.Logger }

func (s stripeLogger) Debugf(f string, v ...any) { s.l.Sugar().Debugf(f, v...) }
func (s stripeLogger) Infof(f string, v ...any)  { s.l.Sugar().Debugf(f, v...) }
func (s stripeLogger) Warnf(f string, v ...any)  { s.l.Sugar().Warnf(f, v...) }
func (s stripeLogger) Errorf(f string, v ...any) { s.l.Sugar().Errorf(f, v...) }

// Interface guards
var _ stripe.LeveledLoggerInterface = stripeLogger{}
