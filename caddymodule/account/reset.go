package account

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/clientip"
	"github.com/caddy-textgen/textgen/ledger"
)

// Forgetting the password, and the links that set one: a reset link (1 hour) or an invitation
// (7 days, for an account the operator made). "Forgot password" answers the same for every
// address, known or not, and in the same time: the lookup and the e-mail happen after the
// answer, off the request. A link's token moves from the address into a cookie of the link's
// path at once, so that it is not left in the address bar, the history or a Referer; it is used
// up when the new password is set, which ends every session of the account.

// passwordLink is one kind of link that sets a password.
type passwordLink struct {
	purpose      ledger.TokenPurpose
	path, cookie string
	title, again string
}

var passwordLinks = []passwordLink{
	{purpose: ledger.TokenReset, path: "/reset", cookie: "_reset", title: "Choose a new password",
		again: "Ask for a new one on the “Forgot your password?” page."},
	{purpose: ledger.TokenInvite, path: "/invite", cookie: "_invite", title: "Choose your password",
		again: "Ask the operator of this service for a new invitation."},
}

type forgotForm struct {
	Email   string
	Sent    bool
	NoEmail bool // the service sends no e-mail
}

func (a *app) forgotForm(w http.ResponseWriter, r *http.Request) {
	a.render(w, r, http.StatusOK, "forgot", page{Title: "Forgot your password?", CSRF: a.anonCSRF(w, r),
		Data: forgotForm{NoEmail: a.mail == nil}})
}

func (a *app) forgot(w http.ResponseWriter, r *http.Request) {
	if !a.parseForm(w, r) {
		return
	}
	email := strings.ToLower(strings.TrimSpace(r.PostFormValue("email")))
	f := forgotForm{Email: email, NoEmail: a.mail == nil}
	show := func(status int, msg string) {
		a.render(w, r, status, "forgot", page{Title: "Forgot your password?", CSRF: a.anonCSRF(w, r), Error: msg, Data: f})
	}
	if !a.checkAnonCSRF(r) {
		show(http.StatusForbidden, "The form had expired. Please try again.")
		return
	}
	if a.mail == nil {
		show(http.StatusServiceUnavailable, "This service sends no e-mail. Please contact its operator.")
		return
	}
	if _, ok, wait := a.forgotByIP.Take(context.WithoutCancel(r.Context()), clientip.Key(r), now()); !ok {
		w.Header().Set("Retry-After", retryAfter(wait))
		show(http.StatusTooManyRequests, "Too many requests from your address. Please wait a while and try again.")
		return
	}
	if email == "" || len(email) > 254 || !strings.Contains(email, "@") {
		show(http.StatusBadRequest, "Enter a valid email address, like name@example.com.")
		return
	}
	a.background.Go(func() { a.sendReset(email) })
	f.Sent = true
	a.render(w, r, http.StatusOK, "forgot", page{Title: "Check your e-mail", Data: f})
}

// sendReset e-mails a reset link to the account of email, if there is an active one and the
// address has not had too many. It runs after the answer.
func (a *app) sendReset(email string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, ok, _ := a.forgotByEmail.Take(ctx, email, now()); !ok {
		return
	}
	acct, err := a.store.GetAccountByEmail(ctx, email)
	if err != nil || acct.Status != ledger.StatusActive {
		return
	}
	if _, err := a.sendTokenMail(ctx, acct, ledger.TokenReset, resetTTL, "reset", "/reset"); err != nil {
		a.logger.Error("queueing the password reset e-mail", zap.String("account", acct.ID), zap.Error(err))
	}
}

type setPasswordForm struct {
	Email, Action string
}

// passwordLinkForm follows a link (?token=...: moved into the link's cookie, then a redirect)
// and shows the form for the new password.
func (a *app) passwordLinkForm(l passwordLink) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tok := r.URL.Query().Get("token"); tok != "" {
			refund, ok := a.tokenGate(w, r)
			if !ok {
				return
			}
			if _, err := a.store.PeekToken(r.Context(), l.purpose, tok); err != nil {
				a.linkError(w, r, l, err)
				return
			}
			refund()
			http.SetCookie(w, &http.Cookie{Name: a.cookieName + l.cookie, Value: tok, Path: a.prefix + l.path,
				MaxAge: int(inviteTTL.Seconds()), HttpOnly: true, Secure: a.secure(r), SameSite: http.SameSiteLaxMode})
			http.Redirect(w, r, a.prefix+l.path, http.StatusSeeOther)
			return
		}
		acct, ok := a.linkAccount(w, r, l)
		if !ok {
			return
		}
		a.render(w, r, http.StatusOK, "set_password", page{Title: l.title, CSRF: a.anonCSRF(w, r),
			Data: setPasswordForm{Email: acct.Email, Action: a.prefix + l.path}})
	}
}

// linkAccount is the account of the link's cookie, or answers the request and returns false.
// A cookie is a token like the link's, so a bad one counts against the same throttle.
func (a *app) linkAccount(w http.ResponseWriter, r *http.Request, l passwordLink) (ledger.Account, bool) {
	c, err := r.Cookie(a.cookieName + l.cookie)
	if err != nil {
		a.badLink(w, r, l.again)
		return ledger.Account{}, false
	}
	refund, ok := a.tokenGate(w, r)
	if !ok {
		return ledger.Account{}, false
	}
	acct, err := a.store.PeekToken(r.Context(), l.purpose, c.Value)
	if err != nil {
		a.linkError(w, r, l, err)
		return ledger.Account{}, false
	}
	refund()
	return acct, true
}

func (a *app) linkError(w http.ResponseWriter, r *http.Request, l passwordLink, err error) {
	if errors.Is(err, ledger.ErrInvalidToken) {
		a.badLink(w, r, l.again)
		return
	}
	a.internalError(w, r, nil, "reading a link", err)
}

// passwordLinkSet sets the password, uses the link up, ends every session of the account and
// logs this browser in.
func (a *app) passwordLinkSet(l passwordLink) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.parseForm(w, r) {
			return
		}
		if !a.checkAnonCSRF(r) {
			a.errorPage(w, r, nil, http.StatusForbidden, "Form expired", "This form is out of date. Open the link from the e-mail again.")
			return
		}
		acct, ok := a.linkAccount(w, r, l)
		if !ok {
			return
		}
		password := r.PostFormValue("password")
		var weak *ledger.WeakPasswordError
		if err := ledger.CheckPasswordPolicy(acct.Email, password); errors.As(err, &weak) {
			a.render(w, r, http.StatusBadRequest, "set_password", page{Title: l.title, CSRF: a.anonCSRF(w, r), Error: weak.Reason,
				Data: setPasswordForm{Email: acct.Email, Action: a.prefix + l.path}})
			return
		}
		c, _ := r.Cookie(a.cookieName + l.cookie)
		if _, err := a.store.ConsumeToken(r.Context(), l.purpose, c.Value); err != nil {
			a.linkError(w, r, l, err) // another request used it first
			return
		}
		var err error
		if herr := a.withHash(r.Context(), func() { err = a.store.SetPassword(context.WithoutCancel(r.Context()), acct.ID, password) }); herr != nil {
			return
		}
		if err != nil {
			a.internalError(w, r, nil, "setting a password", err)
			return
		}
		// The link came by e-mail: its reader has the address.
		if acct.Unverified {
			if acct, err = a.store.SetEmailVerified(r.Context(), acct.ID); err != nil {
				a.logger.Warn("verifying email after a password link", zap.String("account", acct.ID), zap.Error(err))
			}
		}
		a.logger.Info("password set by link", zap.String("account", acct.ID), zap.String("purpose", string(l.purpose)))
		// The other links that set a password, sent before, no longer work.
		for _, p := range []ledger.TokenPurpose{ledger.TokenReset, ledger.TokenInvite} {
			if err := a.store.DeleteTokens(context.WithoutCancel(r.Context()), acct.ID, p); err != nil {
				a.logger.Error("ending the password links", zap.String("account", acct.ID), zap.Error(err))
			}
		}
		http.SetCookie(w, &http.Cookie{Name: a.cookieName + l.cookie, Value: "", Path: a.prefix + l.path, MaxAge: -1,
			HttpOnly: true, Secure: a.secure(r), SameSite: http.SameSiteLaxMode})
		if acct.Status != ledger.StatusActive {
			a.errorPage(w, r, nil, http.StatusForbidden, "Password set", "Your password is set, but this account is disabled. Please contact the operator of this service.")
			return
		}
		a.startSession(w, r, acct)
	}
}
