package account

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/clientip"
	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
	"github.com/caddy-textgen/textgen/ledger"
)

// Redeeming a code (ledger/codes.go) on the buy page: the code's live credits go to the account
// the session acts for, once. A code that cannot be redeemed (unknown, disabled, expired or used
// up: one answer for all) counts against the account and the client address, as wrong
// passwords do, so that codes cannot be guessed here either; POST /api/v1/credits/redeem is the
// same with an API key.

var (
	// redeemLimitPerAccount: 10 codes that cannot be redeemed per account in an hour.
	redeemLimitPerAccount = ratelimit.Limit{Requests: 10, Window: time.Hour, Burst: 10}
	// redeemLimitPerAddress: 30 per client address in an hour, over any accounts.
	redeemLimitPerAddress = ratelimit.Limit{Requests: 30, Window: time.Hour, Burst: 30}
)

const badCode = "This code cannot be redeemed. Check how it was typed (letters and digits; case, spaces and hyphens do not matter), or ask whoever gave it to you. Nothing was credited."

func (a *app) redeem(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	code := r.PostFormValue("code")
	fail := func(status int, msg string) {
		p := a.buyPageData(sc)
		p.Error = msg
		a.render(w, r, status, "buy", p)
	}
	// Counted before the lookup (so that guesses sent all at once are limited too) and refunded
	// unless the code was wrong.
	t := now()
	ip := clientip.Key(r)
	lctx := context.WithoutCancel(r.Context())
	byIP, ok, wait := a.redeemByIP.Take(lctx, ip, t)
	if !ok {
		a.redeemThrottled(w, fail, wait)
		return
	}
	byAccount, ok, wait := a.redeemByAccount.Take(lctx, sc.acct.ID, t)
	if !ok {
		byIP.Refund(lctx)
		a.redeemThrottled(w, fail, wait)
		return
	}
	res, err := a.store.Redeem(r.Context(), sc.acct.ID, code)
	if !errors.Is(err, ledger.ErrCodeNotRedeemable) {
		byIP.Refund(lctx)
		byAccount.Refund(lctx)
	}
	switch {
	case err == nil:
		a.logger.Info("code redeemed", zap.String("account", sc.acct.ID), zap.String("login", sc.login.ID),
			zap.String("code_id", res.Code.ID), zap.Int64("credits", res.Entry.Amount))
		http.Redirect(w, r, fmt.Sprintf("%s/buy?redeemed=%d", a.prefix, res.Entry.Amount), http.StatusSeeOther)
	case errors.Is(err, ledger.ErrCodeNotRedeemable):
		a.logger.Info("a code that cannot be redeemed", zap.String("account", sc.acct.ID), zap.String("client", ip))
		fail(http.StatusBadRequest, badCode)
	case errors.Is(err, ledger.ErrAlreadyRedeemed):
		fail(http.StatusConflict, "This account has already redeemed this code: a code credits an account once.")
	case errors.Is(err, ledger.ErrAccountDisabled):
		fail(http.StatusForbidden, "This account is disabled. Please contact the operator of this service.")
	case errors.Is(err, ledger.ErrUnavailable):
		w.Header().Set("Retry-After", "5")
		fail(http.StatusServiceUnavailable, "Credits cannot be added right now. Nothing was credited; please try again in a moment.")
	default:
		a.internalError(w, r, sc, "redeeming a code", err)
	}
}

func (a *app) redeemThrottled(w http.ResponseWriter, fail func(int, string), wait time.Duration) {
	mins := int(math.Ceil(wait.Minutes()))
	w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
	fail(http.StatusTooManyRequests, fmt.Sprintf("Too many codes that cannot be redeemed. Please wait %d minute%s and try again.", mins, plural(mins)))
}
