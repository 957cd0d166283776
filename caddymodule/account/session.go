package account

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"

	"github.com/caddy-textgen/textgen/caddymodule/internal/webarea"
	"github.com/caddy-textgen/textgen/ledger"
)

// Sessions are server-side (the ledger stores the SHA-256 of the token, the expiry and a CSRF
// secret); the browser holds only the token, in a cookie that is HttpOnly, SameSite=Lax, limited
// to the account area's path, and Secure whenever the request came over TLS or the configured
// public URL is https. Plain-http requests (local tests, a loopback setup) get a cookie without
// Secure, because a browser would not send a Secure cookie back over http.
//
// CSRF: every POST form carries a token. For a logged-in user it is the session's own CSRF
// secret (synchronizer token, compared in constant time); for the sign-up and log-in forms,
// which have no session yet, it is a random value that must match a cookie of its own (double
// submit). On top of that, Go's CrossOriginProtection refuses cross-site POSTs by their
// Sec-Fetch-Site / Origin headers. The Stripe webhook is exempt from both: it is authenticated
// by its signature.

const csrfField = "csrf_token"

// authed wraps a GET page that needs a logged-in account.
func (a *app) authed(f func(http.ResponseWriter, *http.Request, *sessionCtx)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sc, ok := a.session(w, r)
		if !ok {
			return
		}
		f(w, r, sc)
	}
}

// authedPost wraps a form POST that needs a logged-in account and its CSRF token.
func (a *app) authedPost(f func(http.ResponseWriter, *http.Request, *sessionCtx)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.parseForm(w, r) {
			return
		}
		sc, ok := a.session(w, r)
		if !ok {
			return
		}
		if !webarea.TokensEqual(r.PostFormValue(csrfField), sc.sess.CSRFToken) {
			a.csrfFailed(w, r, sc)
			return
		}
		f(w, r, sc)
	}
}

// sessionCtx is the logged-in state of a request.
type sessionCtx struct {
	token string
	sess  ledger.Session
	// acct is the account the request acts on: the login's own, or the organisation chosen
	// (org.go); login is the person logged in, role their role in acct.
	acct  ledger.Account
	login ledger.Account
	role  ledger.Role
	inOrg bool
}

// session loads the request's session. Without a valid one it redirects to the log-in page
// (saying so when a session had expired) and returns false.
func (a *app) session(w http.ResponseWriter, r *http.Request) (*sessionCtx, bool) {
	c, err := r.Cookie(a.cookieName)
	if err != nil || c.Value == "" {
		http.Redirect(w, r, a.prefix+"/login", http.StatusSeeOther)
		return nil, false
	}
	sess, acct, err := a.store.GetSession(r.Context(), c.Value)
	if err == nil && !now().Before(sess.Expires) {
		err = ledger.ErrInvalidSession
		_ = a.store.DeleteSession(r.Context(), c.Value)
	}
	if err == nil && acct.Status == ledger.StatusDisabled {
		err = ledger.ErrInvalidSession
	}
	switch {
	case errors.Is(err, ledger.ErrInvalidSession):
		a.clearCookie(w, r, a.cookieName)
		http.Redirect(w, r, a.prefix+"/login?expired=1", http.StatusSeeOther)
		return nil, false
	case err != nil:
		a.internalError(w, r, nil, "loading session", err)
		return nil, false
	}
	sc := &sessionCtx{token: c.Value, sess: sess, acct: acct}
	return sc, a.actAs(w, r, sc)
}

// parseForm reads a POST form (bounded) and applies the cross-origin check. It answers the
// request itself and returns false when either fails.
func (a *app) parseForm(w http.ResponseWriter, r *http.Request) bool {
	return webarea.ReadForm(w, r, a.origin, a.logger, func(status int, title, msg string) {
		a.errorPage(w, r, nil, status, title, msg)
	})
}

func (a *app) csrfFailed(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	a.errorPage(w, r, sc, http.StatusForbidden, "Form expired",
		"This form is out of date or was not sent from this site. Go back, reload the page and try again.")
}

// secure reports whether cookies for this request get the Secure attribute.
func (a *app) secure(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(a.publicURL, "https://")
}

func (a *app) setSessionCookie(w http.ResponseWriter, r *http.Request, token string) {
	http.SetCookie(w, &http.Cookie{
		Name:     a.cookieName,
		Value:    token,
		Path:     a.prefix,
		MaxAge:   int(a.sessionLifetime.Seconds()),
		HttpOnly: true,
		Secure:   a.secure(r),
		SameSite: http.SameSiteLaxMode,
	})
}

func (a *app) clearCookie(w http.ResponseWriter, r *http.Request, name string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: a.prefix, MaxAge: -1,
		HttpOnly: true, Secure: a.secure(r), SameSite: http.SameSiteLaxMode})
}

// anonCSRF returns the double-submit token of the log-in and sign-up forms, setting its cookie
// when the browser has none yet.
func (a *app) anonCSRF(w http.ResponseWriter, r *http.Request) string {
	name := a.cookieName + "_csrf"
	if c, err := r.Cookie(name); err == nil && len(c.Value) == 43 {
		return c.Value
	}
	var b [32]byte
	rand.Read(b[:])
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{Name: name, Value: tok, Path: a.prefix, HttpOnly: true,
		Secure: a.secure(r), SameSite: http.SameSiteStrictMode})
	return tok
}

// checkAnonCSRF compares the form's token with the cookie's.
func (a *app) checkAnonCSRF(r *http.Request) bool {
	c, err := r.Cookie(a.cookieName + "_csrf")
	return err == nil && webarea.TokensEqual(r.PostFormValue(csrfField), c.Value)
}
