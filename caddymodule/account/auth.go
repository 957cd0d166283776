package account

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/clientip"
	"github.com/caddy-textgen/textgen/ledger"
)

// The message for every failed log-in, whether the email is unknown or the password wrong.
const badLogin = "The email or password is not correct."

type authForm struct {
	Email    string
	Expired  bool
	LoggedIn bool
	// Reset: passwords can be reset by e-mail (the log-in page links to it only then).
	Reset bool
}

func (a *app) signupForm(w http.ResponseWriter, r *http.Request) {
	if a.loggedIn(r) {
		http.Redirect(w, r, a.prefix+"/", http.StatusSeeOther)
		return
	}
	a.authPage(w, r, http.StatusOK, "signup", "", authForm{})
}

func (a *app) loginForm(w http.ResponseWriter, r *http.Request) {
	if a.loggedIn(r) {
		http.Redirect(w, r, a.prefix+"/", http.StatusSeeOther)
		return
	}
	q := r.URL.Query()
	a.authPage(w, r, http.StatusOK, "login", "", authForm{Expired: q.Has("expired"), LoggedIn: q.Has("logged_out")})
}

// loggedIn reports whether the request carries a live session (for the log-in and sign-up
// pages, which send a logged-in user to the dashboard).
func (a *app) loggedIn(r *http.Request) bool {
	c, err := r.Cookie(a.cookieName)
	if err != nil {
		return false
	}
	s, acct, err := a.store.GetSession(r.Context(), c.Value)
	return err == nil && now().Before(s.Expires) && acct.Status == ledger.StatusActive
}

func (a *app) authPage(w http.ResponseWriter, r *http.Request, status int, name, errMsg string, f authForm) {
	title := "Log in"
	if name == "signup" {
		title = "Create your account"
	}
	f.Reset = a.mail != nil
	a.render(w, r, status, name, page{Title: title, CSRF: a.anonCSRF(w, r), Error: errMsg, Data: f})
}

func (a *app) signup(w http.ResponseWriter, r *http.Request) {
	if !a.parseForm(w, r) {
		return
	}
	email := strings.TrimSpace(r.PostFormValue("email"))
	form := authForm{Email: email}
	if !a.checkAnonCSRF(r) {
		a.authPage(w, r, http.StatusForbidden, "signup", "The form had expired. Please try again.", form)
		return
	}
	// Every sign-up from an address counts, the refused ones too: "this email already exists"
	// would otherwise answer, unlimited, which emails have accounts. Only a weak password or a
	// malformed email (checked before the email is looked up, so they reveal nothing) is
	// refunded.
	t := now()
	ip := clientip.Key(r)
	// The throttles' own context: a refund must reach the limits store after the client left.
	lctx := context.WithoutCancel(r.Context())
	taken, ok, wait := a.signupByIP.Take(lctx, ip, t)
	if !ok {
		a.throttled(w, r, "signup", form, wait)
		return
	}
	var acct ledger.Account
	var err error
	if herr := a.withHash(r.Context(), func() {
		acct, err = a.store.CreateAccountWithPassword(r.Context(), email, r.PostFormValue("password"))
	}); herr != nil {
		taken.Refund(lctx)
		return // the client went away
	}
	var weak *ledger.WeakPasswordError
	switch {
	case errors.As(err, &weak):
		taken.Refund(lctx)
		a.authPage(w, r, http.StatusBadRequest, "signup", weak.Reason, form)
		return
	case errors.Is(err, ledger.ErrDuplicateEmail):
		a.authPage(w, r, http.StatusConflict, "signup", "An account with this email already exists. Log in instead.", form)
		return
	case errors.Is(err, ledger.ErrInvalidArgument):
		taken.Refund(lctx)
		a.authPage(w, r, http.StatusBadRequest, "signup", "Enter a valid email address, like name@example.com.", form)
		return
	case err != nil:
		taken.Refund(lctx)
		a.internalError(w, r, nil, "sign-up", err)
		return
	}
	a.logger.Info("account signed up", zap.String("account", acct.ID))
	a.afterSignUp(r.Context(), acct)
	// Free test credits from the start, so a test key works at once.
	if _, _, err := a.store.RefillTestCredits(r.Context(), acct.ID, a.testCredits); err != nil {
		a.logger.Warn("granting the first test credits", zap.String("account", acct.ID), zap.Error(err))
	}
	a.startSession(w, r, acct)
}

func (a *app) login(w http.ResponseWriter, r *http.Request) {
	if !a.parseForm(w, r) {
		return
	}
	email := strings.ToLower(strings.TrimSpace(r.PostFormValue("email")))
	form := authForm{Email: email}
	if !a.checkAnonCSRF(r) {
		a.authPage(w, r, http.StatusForbidden, "login", "The form had expired. Please try again.", form)
		return
	}
	// The attempt counts as a failure before its password is checked (so that attempts sent
	// all at once are limited too) and is refunded unless the password was wrong.
	t := now()
	ip := clientip.Key(r)
	// The throttles' own context: a refund must reach the limits store after the client left.
	lctx := context.WithoutCancel(r.Context())
	byIP, ok, wait := a.failByIP.Take(lctx, ip, t)
	if !ok {
		a.throttled(w, r, "login", form, wait)
		return
	}
	byAccountAddr, ok, wait := a.failByAccountAddr.Take(lctx, email+"\x00"+ip, t)
	if !ok {
		byIP.Refund(lctx)
		a.throttled(w, r, "login", form, wait)
		return
	}
	byAccount, ok, _ := a.failByAccount.Take(lctx, email, t)
	refund := func() {
		byIP.Refund(lctx)
		byAccountAddr.Refund(lctx)
		byAccount.Refund(lctx)
	}
	if !ok {
		// Many failures from anywhere: slow the account's log-ins down, one at a time, rather
		// than lock its owner out.
		l := &a.slowLocks[maphash.String(slowSeed, email)%uint64(len(a.slowLocks))]
		l.Lock()
		defer l.Unlock()
		if err := slowDown(r.Context(), slowDownDelay); err != nil {
			refund()
			return // the client went away
		}
	}
	var acct ledger.Account
	var err error
	if herr := a.withHash(r.Context(), func() {
		acct, err = a.store.Authenticate(r.Context(), email, r.PostFormValue("password"))
	}); herr != nil {
		refund() // the client went away before its password was checked
		return
	}
	switch {
	case errors.Is(err, ledger.ErrInvalidCredentials):
		a.logger.Info("failed log-in", zap.String("client", ip))
		a.authPage(w, r, http.StatusUnauthorized, "login", badLogin, form)
		return
	case errors.Is(err, ledger.ErrAccountDisabled):
		refund()
		a.authPage(w, r, http.StatusForbidden, "login", "This account is disabled. Please contact the operator of this service.", form)
		return
	case err != nil:
		refund()
		a.internalError(w, r, nil, "log-in", err)
		return
	}
	byIP.Refund(lctx)
	byAccount.Refund(lctx)
	a.failByAccountAddr.Reset(lctx, email+"\x00"+ip)
	a.startSession(w, r, acct)
}

// slowSeed picks an account's slow-down lock.
var slowSeed = maphash.MakeSeed()

func (a *app) throttled(w http.ResponseWriter, r *http.Request, name string, f authForm, wait time.Duration) {
	mins := int(math.Ceil(wait.Minutes()))
	w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
	msg := fmt.Sprintf("Too many attempts. Please wait %d minute%s and try again.", mins, plural(mins))
	a.authPage(w, r, http.StatusTooManyRequests, name, msg, f)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// startSession logs the account in: a fresh session (never one the browser brought along), its
// cookie, and the dashboard.
func (a *app) startSession(w http.ResponseWriter, r *http.Request, acct ledger.Account) {
	if c, err := r.Cookie(a.cookieName); err == nil {
		_ = a.store.DeleteSession(r.Context(), c.Value)
	}
	token, _, err := a.store.CreateSession(r.Context(), acct.ID, a.sessionLifetime)
	if err != nil {
		a.internalError(w, r, nil, "creating session", err)
		return
	}
	a.setSessionCookie(w, r, token)
	a.clearCookie(w, r, a.cookieName+"_csrf")
	http.Redirect(w, r, a.prefix+"/", http.StatusSeeOther)
}

func (a *app) logout(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	if err := a.store.DeleteSession(r.Context(), sc.token); err != nil {
		a.internalError(w, r, sc, "ending session", err)
		return
	}
	a.clearCookie(w, r, a.cookieName)
	a.clearCookie(w, r, a.orgCookie())
	http.Redirect(w, r, a.prefix+"/login?logged_out=1", http.StatusSeeOther)
}
