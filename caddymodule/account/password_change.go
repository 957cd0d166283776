package account

import (
	"context"
	"errors"
	"net/http"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The settings page: changing the password (it needs the current one, and ends every other
// session of the account), the low-balance alert (low_balance.go) and, for an unverified
// address, a new verification e-mail (verify.go).

type settingsData struct {
	Unverified, MailOn bool
	// AlertsOn: the low-balance alert also raises balance.low for the account's endpoints.
	AlertsOn        bool
	LowBalanceAlert int64
}

func (a *app) settings(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	a.settingsPage(w, r, sc, http.StatusOK, "")
}

func (a *app) settingsPage(w http.ResponseWriter, r *http.Request, sc *sessionCtx, status int, errMsg string) {
	p := sc.page("Settings", "settings")
	q := r.URL.Query()
	switch {
	case q.Has("changed"):
		p.Flash = "Your password is changed. Every other session of your account has ended."
	case q.Has("alert"):
		p.Flash = "Your low-balance alert is saved."
	case q.Has("sent"):
		p.Flash = "We sent you a new link. It works for 48 hours."
	}
	p.Error = errMsg
	p.Data = settingsData{Unverified: sc.login.Unverified, MailOn: a.mail != nil, AlertsOn: a.alerts != nil, LowBalanceAlert: sc.acct.LowBalanceAlert}
	a.render(w, r, status, "settings", p)
}

func (a *app) changePassword(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	lctx := context.WithoutCancel(r.Context())
	taken, ok, wait := a.passwordFailByAccount.Take(lctx, sc.login.ID, now())
	if !ok {
		w.Header().Set("Retry-After", retryAfter(wait))
		a.settingsPage(w, r, sc, http.StatusTooManyRequests, "Too many wrong passwords. Please wait a while and try again.")
		return
	}
	var err error
	if herr := a.withHash(r.Context(), func() {
		_, err = a.store.Authenticate(r.Context(), sc.login.Email, r.PostFormValue("current_password"))
	}); herr != nil {
		taken.Refund(lctx)
		return
	}
	switch {
	case errors.Is(err, ledger.ErrInvalidCredentials):
		a.logger.Info("wrong current password", zap.String("account", sc.login.ID))
		a.settingsPage(w, r, sc, http.StatusUnauthorized, "Your current password is not correct.")
		return
	case err != nil:
		taken.Refund(lctx)
		a.internalError(w, r, sc, "checking the password", err)
		return
	}
	taken.Refund(lctx)
	if herr := a.withHash(r.Context(), func() {
		err = a.store.SetPassword(lctx, sc.login.ID, r.PostFormValue("new_password"))
	}); herr != nil {
		return
	}
	var weak *ledger.WeakPasswordError
	switch {
	case errors.As(err, &weak):
		a.settingsPage(w, r, sc, http.StatusBadRequest, weak.Reason)
		return
	case err != nil:
		a.internalError(w, r, sc, "changing the password", err)
		return
	}
	a.logger.Info("password changed", zap.String("account", sc.login.ID))
	// A reset link sent before no longer works: whoever reads that mailbox now must not undo
	// the change.
	if err := a.store.DeleteTokens(lctx, sc.login.ID, ledger.TokenReset); err != nil {
		a.logger.Error("ending the reset links after a password change", zap.String("account", sc.login.ID), zap.Error(err))
	}
	// SetPassword ended every session, this one too: this browser gets a new one.
	token, _, err := a.store.CreateSession(r.Context(), sc.login.ID, a.sessionLifetime)
	if err != nil {
		a.internalError(w, r, nil, "creating session", err)
		return
	}
	a.setSessionCookie(w, r, token)
	http.Redirect(w, r, a.prefix+"/settings?changed=1", http.StatusSeeOther)
}
