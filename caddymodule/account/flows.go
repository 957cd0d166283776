package account

import (
	"context"
	"net/http"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/clientip"
	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
)

// The routes and throttles of the flows that e-mail makes possible: verifying the address
// (verify.go), forgetting and resetting the password and accepting an invitation (reset.go),
// changing the password and the low-balance alert (password_change.go, low_balance.go).

// The throttles of these flows, token buckets like the log-in's (app.go).
var (
	// tokenFailLimitPerAddress: 10 invalid links (guessed, used or expired tokens) from one
	// client address, then one every 6 minutes.
	tokenFailLimitPerAddress = ratelimit.Limit{Requests: 10, Window: time.Hour, Burst: 10}
	// forgotLimitPerAddress: 10 "forgot password" requests an hour from one client address,
	// whatever the addresses asked for.
	forgotLimitPerAddress = ratelimit.Limit{Requests: 10, Window: time.Hour, Burst: 10}
	// forgotLimitPerEmail: 3 reset e-mails an hour to one address; past it the answer is the
	// same, but no e-mail is sent.
	forgotLimitPerEmail = ratelimit.Limit{Requests: 3, Window: time.Hour, Burst: 3}
	// resendLimitPerAccount: 3 verification e-mails an hour per account.
	resendLimitPerAccount = ratelimit.Limit{Requests: 3, Window: time.Hour, Burst: 3}
	// passwordChangeFailLimit: 5 wrong current passwords per account, then one every 15 minutes.
	passwordChangeFailLimit = ratelimit.Limit{Requests: 1, Window: 15 * time.Minute, Burst: 5}
)

type mailLimits struct {
	tokenFailByIP, forgotByIP, forgotByEmail, resendByAccount, passwordFailByAccount *ratelimit.Buckets
}

func newMailLimits(s *ratelimit.Shared, name string) mailLimits {
	return mailLimits{
		tokenFailByIP:         ratelimit.NewShared(s, name+"|token-fail-address", tokenFailLimitPerAddress, throttleEntries),
		forgotByIP:            ratelimit.NewShared(s, name+"|forgot-address", forgotLimitPerAddress, throttleEntries),
		forgotByEmail:         ratelimit.NewShared(s, name+"|forgot-email", forgotLimitPerEmail, throttleEntries),
		resendByAccount:       ratelimit.NewShared(s, name+"|verify-resend-account", resendLimitPerAccount, throttleEntries),
		passwordFailByAccount: ratelimit.NewShared(s, name+"|password-change-account", passwordChangeFailLimit, throttleEntries),
	}
}

func (a *app) mailRoutes(m *http.ServeMux) {
	p := a.prefix
	m.HandleFunc("GET "+p+"/verify", a.verifyEmail)
	m.HandleFunc("POST "+p+"/verify/resend", a.authedPost(a.resendVerification))
	m.HandleFunc("GET "+p+"/forgot", a.forgotForm)
	m.HandleFunc("POST "+p+"/forgot", a.forgot)
	for _, l := range passwordLinks {
		m.HandleFunc("GET "+p+l.path, a.passwordLinkForm(l))
		m.HandleFunc("POST "+p+l.path, a.passwordLinkSet(l))
	}
	m.HandleFunc("GET "+p+"/settings", a.authed(a.settings))
	m.HandleFunc("POST "+p+"/password", a.authedPost(a.changePassword))
	m.HandleFunc("POST "+p+"/alerts", a.authedPost(a.setLowBalanceAlert))
}

// tokenGate counts a link's token against the client address's invalid-link throttle before
// it is looked at; the caller refunds it when the token was good. ok is false (and the page
// answered) when the address is throttled.
func (a *app) tokenGate(w http.ResponseWriter, r *http.Request) (refund func(), ok bool) {
	lctx := context.WithoutCancel(r.Context())
	taken, ok, wait := a.tokenFailByIP.Take(lctx, clientip.Key(r), now())
	if !ok {
		w.Header().Set("Retry-After", retryAfter(wait))
		a.errorPage(w, r, nil, http.StatusTooManyRequests, "Too many attempts",
			"Too many invalid links were opened from your address. Please wait a while and try again.")
		return nil, false
	}
	return func() { taken.Refund(lctx) }, true
}

// badLink answers a token that is malformed, unknown, used or expired: one answer for all.
func (a *app) badLink(w http.ResponseWriter, r *http.Request, again string) {
	a.errorPage(w, r, nil, http.StatusBadRequest, "This link does not work",
		"This link is invalid, was used already or has expired. "+again)
}
