package console

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/clientip"
	"github.com/caddy-textgen/textgen/caddymodule/internal/opauth"
	"github.com/caddy-textgen/textgen/caddymodule/internal/webarea"
	"github.com/caddy-textgen/textgen/ledger"
)

// Sessions are My Account's kind (caddymodule/account/session.go), kept apart: the ledger
// stores the SHA-256 of the token, the expiry, the last visit (for the idle timeout) and a CSRF
// secret, shared by every instance; the browser holds only the token, in a cookie that is
// HttpOnly, SameSite=Strict, limited to the console's path, and Secure over TLS. A log-in always
// makes a new session (and ends the one the browser came with), so a token planted before the
// log-in is worth nothing after it.
//
// CSRF: every POST form carries the session's CSRF secret (compared in constant time); the
// log-in form, which has no session yet, a random value that must match a cookie of its own
// (double submit). Go's CrossOriginProtection refuses cross-site POSTs before either.

const csrfField = "csrf_token"

// sessionCtx is the logged-in state of a request.
type sessionCtx struct {
	token string
	sess  ledger.OperatorSession
	op    ledger.Operator
}

// authed wraps a GET page that needs a logged-in operator.
func (a *app) authed(f func(http.ResponseWriter, *http.Request, *sessionCtx)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if sc, ok := a.session(w, r); ok {
			f(w, r, sc)
		}
	}
}

// authedPost wraps a form POST: the cross-origin check, the session, its CSRF token and the
// operator's role, all checked here on the server whatever the page showed.
func (a *app) authedPost(act action, f func(http.ResponseWriter, *http.Request, *sessionCtx, action)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.parseForm(w, r) {
			return
		}
		sc, ok := a.session(w, r)
		if !ok {
			return
		}
		if !webarea.TokensEqual(r.PostFormValue(csrfField), sc.sess.CSRFToken) {
			a.errorPage(w, r, sc, http.StatusForbidden, "Form expired",
				"This form is out of date or was not sent from this console. Go back, reload the page and try again.")
			return
		}
		if !allowed(sc.op.Role, act) {
			a.logger.Warn("console: an action refused to the operator's role", zap.String("operator", sc.op.ID),
				zap.String("role", string(sc.op.Role)), zap.String("action", string(act)))
			a.errorPage(w, r, sc, http.StatusForbidden, "Not allowed",
				"Your role ("+string(sc.op.Role)+") may not "+actionNames[act]+". Ask an owner.")
			return
		}
		f(w, r, sc, act)
	}
}

// session loads the request's session, or redirects to the log-in page and returns false.
func (a *app) session(w http.ResponseWriter, r *http.Request) (*sessionCtx, bool) {
	c, err := r.Cookie(a.cookieName)
	if err != nil || c.Value == "" {
		http.Redirect(w, r, a.prefix+"/login", http.StatusSeeOther)
		return nil, false
	}
	sess, op, err := a.store.GetOperatorSession(r.Context(), c.Value, a.idleTimeout)
	switch {
	case errors.Is(err, ledger.ErrInvalidSession):
		a.clearCookie(w, r, a.cookieName)
		http.Redirect(w, r, a.prefix+"/login?expired=1", http.StatusSeeOther)
		return nil, false
	case err != nil:
		a.internalError(w, r, nil, "load the session", err)
		return nil, false
	}
	return &sessionCtx{token: c.Value, sess: sess, op: op}, true
}

// parseForm reads a POST form (bounded) after the cross-origin check.
func (a *app) parseForm(w http.ResponseWriter, r *http.Request) bool {
	return webarea.ReadForm(w, r, a.origin, a.logger, func(status int, title, msg string) {
		a.errorPage(w, r, nil, status, title, msg)
	})
}

func (a *app) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: a.prefix, MaxAge: maxAge, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
}

func (a *app) clearCookie(w http.ResponseWriter, r *http.Request, name string) {
	http.SetCookie(w, a.cookie(r, name, "", -1))
}

var csrfCookieRe = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

// anonCSRF is the log-in form's double-submit token, set as a cookie when the browser has none.
func (a *app) anonCSRF(w http.ResponseWriter, r *http.Request) string {
	name := a.cookieName + "_csrf"
	if c, err := r.Cookie(name); err == nil && csrfCookieRe.MatchString(c.Value) {
		return c.Value
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	v := base64.RawURLEncoding.EncodeToString(b[:])
	http.SetCookie(w, a.cookie(r, name, v, 3600))
	return v
}

type loginData struct {
	Email   string
	Expired bool
}

func (a *app) loginPage(w http.ResponseWriter, r *http.Request) {
	a.render(w, r, http.StatusOK, "login", nil, page{Title: "Log in", CSRF: a.anonCSRF(w, r),
		Data: loginData{Expired: r.URL.Query().Get("expired") != ""}})
}

// login checks the password and the second factor, then starts a new session. Every failure,
// whatever was wrong, counts against the throttles and gets the same answer.
func (a *app) login(w http.ResponseWriter, r *http.Request) {
	if !a.parseForm(w, r) {
		return
	}
	email := strings.ToLower(strings.TrimSpace(r.PostFormValue("email")))
	c, err := r.Cookie(a.cookieName + "_csrf")
	if err != nil || !webarea.TokensEqual(r.PostFormValue(csrfField), c.Value) {
		a.render(w, r, http.StatusForbidden, "login", nil, page{Title: "Log in", CSRF: a.anonCSRF(w, r),
			Error: "The log-in form expired. Please try again.", Data: loginData{Email: email}})
		return
	}
	fail := func(status int, msg string) {
		a.render(w, r, status, "login", nil, page{Title: "Log in", CSRF: a.anonCSRF(w, r), Error: msg, Data: loginData{Email: email}})
	}
	ip := clientip.Key(r)
	t := now()
	lctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	byAddr, ok, _ := a.failByAddr.Take(lctx, ip, t)
	if !ok {
		fail(http.StatusTooManyRequests, "Too many failed log-ins from this address. Wait 15 minutes and try again.")
		return
	}
	_, ok, _ = a.failByEmailAddr.Take(lctx, email+"\x00"+ip, t)
	if !ok {
		byAddr.Refund(lctx)
		fail(http.StatusTooManyRequests, "Too many failed log-ins for this e-mail. Wait 15 minutes and try again.")
		return
	}
	op, err := a.checkLogin(r.Context(), email, r.PostFormValue("password"), r.PostFormValue("code"), t)
	if err != nil {
		switch {
		case errors.Is(err, ledger.ErrCodeUsed):
			fail(http.StatusUnauthorized, "That code was used already. Wait for the next code of your app and log in with it.")
		case errors.Is(err, errWrongLogin):
			fail(http.StatusUnauthorized, "Wrong e-mail, password or code.")
		default:
			a.internalError(w, r, nil, "check the log-in", err)
		}
		return
	}
	// A success gives the address back its attempts for this e-mail.
	a.failByEmailAddr.Reset(lctx, email+"\x00"+ip)
	byAddr.Refund(lctx)
	if old, err := r.Cookie(a.cookieName); err == nil && old.Value != "" {
		_ = a.store.DeleteOperatorSession(r.Context(), old.Value)
	}
	token, _, err := a.store.CreateOperatorSession(r.Context(), op.ID, a.sessionLifetime)
	if err != nil {
		a.internalError(w, r, nil, "start the session", err)
		return
	}
	http.SetCookie(w, a.cookie(r, a.cookieName, token, int(a.sessionLifetime.Seconds())))
	a.clearCookie(w, r, a.cookieName+"_csrf")
	a.logger.Info("console: operator logged in", zap.String("operator", op.ID), zap.String("role", string(op.Role)))
	http.Redirect(w, r, a.prefix+"/", http.StatusSeeOther)
}

// errWrongLogin is a wrong e-mail, password or second factor, which the page does not tell
// apart.
var errWrongLogin = errors.New("wrong e-mail, password or code")

// sixDigits is what a TOTP code looks like; anything else is tried as a recovery code.
var sixDigits = regexp.MustCompile(`^\s*[0-9]{3}\s?[0-9]{3}\s*$`)

func (a *app) checkLogin(ctx context.Context, email, password, code string, t time.Time) (ledger.Operator, error) {
	op, sealed, err := a.store.AuthenticateOperator(ctx, email, password)
	if errors.Is(err, ledger.ErrInvalidCredentials) {
		return ledger.Operator{}, errWrongLogin
	}
	if err != nil {
		return ledger.Operator{}, err
	}
	if sixDigits.MatchString(code) {
		step, err := opauth.CheckTOTP(a.sealer, op, sealed, code, t)
		if errors.Is(err, opauth.ErrBadCode) {
			return ledger.Operator{}, errWrongLogin
		}
		if err != nil {
			return ledger.Operator{}, err
		}
		// The ledger keeps the last step used: the same code, here or on another instance, is
		// refused from now on.
		if err := a.store.UseTOTPStep(ctx, op.ID, step); err != nil {
			return ledger.Operator{}, err
		}
		return op, nil
	}
	switch err := a.store.UseRecoveryCode(ctx, op.ID, code); {
	case errors.Is(err, ledger.ErrInvalidCredentials):
		return ledger.Operator{}, errWrongLogin
	case err != nil:
		return ledger.Operator{}, err
	}
	a.logger.Warn("console: an operator logged in with a recovery code", zap.String("operator", op.ID))
	return op, nil
}

func (a *app) logout(w http.ResponseWriter, r *http.Request, sc *sessionCtx, _ action) {
	if err := a.store.DeleteOperatorSession(r.Context(), sc.token); err != nil {
		a.internalError(w, r, sc, "end the session", err)
		return
	}
	a.clearCookie(w, r, a.cookieName)
	http.Redirect(w, r, a.prefix+"/login", http.StatusSeeOther)
}
