package account

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// Verifying the address: sign-up e-mails a single-use link (48 hours); following it clears the
// account's Unverified flag. An unverified account can log in and use test keys, but neither
// buy credits nor create live keys (verifiedFor), and every page says so (layout.html). Without
// smtp no e-mail can be sent, so sign-ups are verified at once.

// Sign-up credits (signup_credits): live credits given when the address is confirmed, not at
// sign-up, so that only an address its holder reads gets them, and once per account: the grant's
// reference is the account's own (signupReference), which the ledger never credits twice,
// whatever follows a second verification link, a retry or an instance beside this one. The
// grant is made before the account is marked verified: if it fails, the account stays
// unverified and its owner can ask for a new link, which grants then. Without smtp every
// sign-up counts as confirmed, so the credits come at sign-up: for a site on one's own machine.

// signupReference is the reference of an account's sign-up credits.
func signupReference(acct string) string { return "signup-credits:" + acct }

// grantSignupCredits gives the account its sign-up credits, unless it had them already.
func (a *app) grantSignupCredits(ctx context.Context, acct string) error {
	if a.signupCredits <= 0 {
		return nil
	}
	res, err := a.store.Grant(ctx, ledger.GrantRequest{AccountID: acct, Mode: ledger.Live, Kind: ledger.KindGrant,
		Credits: a.signupCredits, Reference: signupReference(acct), Reason: "sign-up credits"})
	if err != nil {
		return err
	}
	if !res.Repeated {
		a.logger.Info("sign-up credits granted", zap.String("account", acct), zap.Int64("credits", a.signupCredits))
	}
	return nil
}

// afterSignUp sends the verification e-mail, or marks the account verified when there is no
// e-mail. A failure leaves the account unverified; its owner can ask again.
func (a *app) afterSignUp(ctx context.Context, acct ledger.Account) {
	if a.mail == nil {
		if err := a.grantSignupCredits(ctx, acct.ID); err != nil {
			a.logger.Error("granting the sign-up credits; grant them by hand with caddy textgen credits grant",
				zap.String("account", acct.ID), zap.String("reference", signupReference(acct.ID)), zap.Error(err))
		}
		if _, err := a.store.SetEmailVerified(ctx, acct.ID); err != nil {
			a.logger.Warn("marking a sign-up verified", zap.String("account", acct.ID), zap.Error(err))
		}
		return
	}
	if _, err := a.sendTokenMail(ctx, acct, ledger.TokenVerify, verifyTTL, "verify", "/verify"); err != nil {
		a.logger.Error("queueing the verification e-mail", zap.String("account", acct.ID), zap.Error(err))
	}
}

// verifyEmail follows a verification link: the token is used up at once (it only confirms
// that its reader got the e-mail).
func (a *app) verifyEmail(w http.ResponseWriter, r *http.Request) {
	refund, ok := a.tokenGate(w, r)
	if !ok {
		return
	}
	acct, err := a.store.ConsumeToken(r.Context(), ledger.TokenVerify, r.URL.Query().Get("token"))
	switch {
	case errors.Is(err, ledger.ErrInvalidToken):
		a.badLink(w, r, "Log in; the page offers to send a new one.")
		return
	case err != nil:
		a.internalError(w, r, nil, "verifying email", err)
		return
	}
	refund()
	if err := a.grantSignupCredits(r.Context(), acct.ID); err != nil {
		a.internalError(w, r, nil, "granting the sign-up credits", err)
		return
	}
	if _, err := a.store.SetEmailVerified(r.Context(), acct.ID); err != nil {
		a.internalError(w, r, nil, "verifying email", err)
		return
	}
	a.logger.Info("email verified", zap.String("account", acct.ID))
	msg := fmt.Sprintf("Thank you: %s is confirmed. You can now buy credits and create live keys.", acct.Email)
	if a.signupCredits > 0 {
		msg = fmt.Sprintf("Thank you: %s is confirmed. Your account has %d free credits for live keys; you can now create live keys and buy credits.", acct.Email, a.signupCredits)
	}
	a.errorPage(w, r, nil, http.StatusOK, "Email address confirmed", msg)
}

// resendVerification sends the verification e-mail again (throttled per account).
func (a *app) resendVerification(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	if !sc.login.Unverified {
		http.Redirect(w, r, a.prefix+"/", http.StatusSeeOther)
		return
	}
	if a.mail == nil {
		a.errorPage(w, r, sc, http.StatusServiceUnavailable, "No e-mail", "This service sends no e-mail. Please contact its operator.")
		return
	}
	if _, ok, wait := a.resendByAccount.Take(context.WithoutCancel(r.Context()), sc.login.ID, now()); !ok {
		w.Header().Set("Retry-After", retryAfter(wait))
		a.errorPage(w, r, sc, http.StatusTooManyRequests, "Too many e-mails",
			fmt.Sprintf("We sent you several links already. Please wait %d minutes and check your spam folder.", int(math.Ceil(wait.Minutes()))))
		return
	}
	if _, err := a.sendTokenMail(r.Context(), sc.login, ledger.TokenVerify, verifyTTL, "verify", "/verify"); err != nil {
		a.internalError(w, r, sc, "queueing the verification e-mail", err)
		return
	}
	http.Redirect(w, r, a.prefix+"/settings?sent=1", http.StatusSeeOther)
}

// The requests that need a verified address.
var (
	always         = func(*http.Request) bool { return true }
	liveKeyRequest = func(r *http.Request) bool { return r.PostFormValue("mode") == string(ledger.Live) }
)

// verifiedFor refuses requests that need (per needs) a verified address of an unverified
// account, explaining why.
func (a *app) verifiedFor(needs func(*http.Request) bool, f func(http.ResponseWriter, *http.Request, *sessionCtx)) func(http.ResponseWriter, *http.Request, *sessionCtx) {
	return func(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
		if sc.login.Unverified && needs(r) {
			a.errorPage(w, r, sc, http.StatusForbidden, "Confirm your email address first",
				"Buying credits and live keys need a confirmed email address. Open the link we e-mailed you, or ask for a new one on the settings page. Test keys work already.")
			return
		}
		f(w, r, sc)
	}
}

func retryAfter(wait time.Duration) string {
	return fmt.Sprint(int(math.Ceil(wait.Seconds())))
}
