package console

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/operator"
	"github.com/caddy-textgen/textgen/ledger"
)

// What an operator may do, by role, checked on the server for every POST (authedPost): the
// pages hide the forms a role may not use, but a forged form gets the same 403.

type action string

const (
	actLogout  action = "logout"
	actNote    action = "note"
	actGrant   action = "grant"
	actAdjust  action = "adjust"
	actDisable action = "disable"
	actEnable  action = "enable"
	actRefund  action = "refund"
	actDrop    action = "drop"   // an e-mail of the outbox (mail.go)
	actSearch  action = "search" // the Accounts page's search, sent as a form (pages.go)
	// Redemption codes (codes.go).
	actCodeCreate  action = "code.create"
	actCodeDisable action = "code.disable"
)

// actionRoles is the least role that may take each action.
var actionRoles = map[action]ledger.OperatorRole{
	actLogout:  ledger.OperatorViewer,
	actNote:    ledger.OperatorSupport,
	actGrant:   ledger.OperatorSupport,
	actAdjust:  ledger.OperatorSupport,
	actDisable: ledger.OperatorOwner,
	actEnable:  ledger.OperatorOwner,
	actRefund:  ledger.OperatorOwner,
	actDrop:    ledger.OperatorSupport,
	actSearch:  ledger.OperatorViewer,
	// A code makes credits for as many accounts as it has uses: an owner's decision.
	actCodeCreate:  ledger.OperatorOwner,
	actCodeDisable: ledger.OperatorSupport,
}

var actionNames = map[action]string{
	actLogout: "log out", actNote: "write notes", actGrant: "grant credits", actAdjust: "adjust credits",
	actDisable: "disable accounts", actEnable: "enable accounts", actRefund: "refund purchases", actDrop: "drop e-mail",
	actSearch: "search accounts", actCodeCreate: "make codes", actCodeDisable: "disable codes",
}

var roleRank = map[ledger.OperatorRole]int{ledger.OperatorViewer: 1, ledger.OperatorSupport: 2, ledger.OperatorOwner: 3}

// allowed reports whether role may take act; an unknown role or action may do nothing.
func allowed(role ledger.OperatorRole, act action) bool {
	need, ok := actionRoles[act]
	return ok && roleRank[role] > 0 && roleRank[role] >= roleRank[need]
}

// maxExpiryDays bounds the expiry a grant of the console may carry (ten years).
const maxExpiryDays = 3650

// errRepeated is a grant whose form was sent before: the ledger credited it once.
var errRepeated = errors.New("this form was sent already")

// formIDRe is what newFormID makes.
var formIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)

// newFormID is a random id for one rendered credit form.
func newFormID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// maxNote is the longest note: it is also the ledger entry's reason, which holds 512 bytes.
const maxNote = 500

// act takes one action on an account: the audit record first (who, what, which account, why),
// then the action through the operator package, the same function the admin API and the CLI
// call. An action that then fails gets a second record that says so.
func (a *app) act(w http.ResponseWriter, r *http.Request, sc *sessionCtx, act action) {
	id := r.PathValue("id")
	note := strings.TrimSpace(r.PostFormValue("note"))
	bad := func(msg string) { a.errorPage(w, r, sc, http.StatusBadRequest, "Not done", msg) }
	if note == "" {
		bad("A note is required: say why (it goes into the audit log). Nothing was changed.")
		return
	}
	if len(note) > maxNote {
		bad(fmt.Sprintf("The note is longer than %d characters. Nothing was changed.", maxNote))
		return
	}
	// Every action is on an account that exists: no record of an action on nothing.
	if _, err := a.store.GetAccount(r.Context(), id); err != nil {
		a.accountMissing(w, r, sc, id, err)
		return
	}
	var detail, recID string
	var do func() error
	switch act {
	case actGrant, actAdjust:
		credits, err := strconv.ParseInt(strings.TrimSpace(r.PostFormValue("credits")), 10, 64)
		if err != nil || credits == 0 || (act == actGrant && credits < 0) {
			bad("Credits must be a whole number other than 0 (above 0 for a grant; an adjustment takes credits off). Nothing was changed.")
			return
		}
		if sc.op.Role != ledger.OperatorOwner && (credits > a.supportGrantLimit || credits < -a.supportGrantLimit) {
			a.logger.Warn("console: a grant above the support limit refused", zap.String("operator", sc.op.ID), zap.Int64("credits", credits))
			a.errorPage(w, r, sc, http.StatusForbidden, "Above your limit",
				fmt.Sprintf("Your role may grant or adjust at most %d credits at a time. Ask an owner. Nothing was changed.", a.supportGrantLimit))
			return
		}
		mode := r.PostFormValue("mode")
		if mode == "" {
			mode = string(ledger.Live)
		}
		if mode != string(ledger.Live) && mode != string(ledger.Test) {
			bad("The kind of credits is live or test. Nothing was changed.")
			return
		}
		// The form's own id is the grant's reference: a form sent twice (a double click, a
		// reload) credits once. A form without one gets its audit record's id.
		formID := r.PostFormValue("form_id")
		if !formIDRe.MatchString(formID) {
			formID = ""
		}
		kind := ledger.KindGrant
		if act == actAdjust {
			kind = ledger.KindAdjustment
		}
		detail = fmt.Sprintf("%+d %s credits", credits, mode)
		// A grant of live credits may expire some whole days after it is made.
		var expires time.Time
		if s := strings.TrimSpace(r.PostFormValue("expires_days")); s != "" && act == actGrant {
			days, err := strconv.Atoi(s)
			if err != nil || days < 1 || days > maxExpiryDays || mode != string(ledger.Live) {
				bad(fmt.Sprintf("Expires after is a whole number of days from 1 to %d, for live credits only; leave it empty for credits that never expire. Nothing was changed.", maxExpiryDays))
				return
			}
			expires = time.Now().UTC().AddDate(0, 0, days)
			detail += ", expiring " + expires.Format(time.RFC3339)
		}
		do = func() error {
			ref := "console:" + cmpOr(formID, recID)
			_, res, err := operator.Credit(r.Context(), a.store, id, kind, mode, credits, ref, note, expires)
			if err == nil && res.Repeated {
				return errRepeated
			}
			return err
		}
	case actDisable, actEnable:
		status := ledger.StatusDisabled
		if act == actEnable {
			status = ledger.StatusActive
		}
		do = func() error { _, err := operator.SetStatus(r.Context(), a.store, id, status); return err }
	case actNote:
		do = func() error { return nil }
	case actRefund:
		ref := strings.TrimSpace(r.PostFormValue("reference"))
		cents, err := parseEUR(r.PostFormValue("amount"))
		if ref == "" || err != nil {
			bad("Give the purchase and an amount in EUR (empty: all that is left). Nothing was changed.")
			return
		}
		// Only a purchase of this account: the page's form names one, a forged one may not.
		if _, err := a.store.Purchase(r.Context(), id, ref); err != nil {
			if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidArgument) {
				bad("This account has no purchase " + ref + ". Nothing was changed.")
				return
			}
			a.internalError(w, r, sc, "read the purchase", err)
			return
		}
		reason := r.PostFormValue("reason")
		switch reason {
		case "", "duplicate", "fraudulent", "requested_by_customer":
		default:
			bad("The reason of a refund is duplicate, fraudulent or requested by the customer. Nothing was changed.")
			return
		}
		detail = fmt.Sprintf("refund of %s, %s", ref, eurOrAll(cents))
		do = func() error { _, err := operator.Refund(r.Context(), a.store, ref, cents, reason); return err }
	default:
		a.errorPage(w, r, sc, http.StatusNotFound, "Page not found", "There is no such action.")
		return
	}
	rec, err := a.store.AppendAudit(r.Context(), ledger.AuditRecord{OperatorID: sc.op.ID, OperatorEmail: sc.op.Email,
		Action: string(act), AccountID: id, Detail: detail, Note: note})
	if err != nil {
		a.internalError(w, r, sc, "write the audit log (nothing was changed)", err)
		return
	}
	recID = rec.ID
	if err := do(); errors.Is(err, errRepeated) {
		a.errorPage(w, r, sc, http.StatusConflict, "Sent already",
			"This form was sent already and credited then; nothing more was credited. Reload the account to see it.")
		return
	} else if err != nil {
		status, msg := http.StatusInternalServerError, "The server could not do it; the log says why."
		var ae caddy.APIError
		if errors.As(err, &ae) && ae.HTTPStatus > 0 && ae.HTTPStatus < 500 {
			status, msg = ae.HTTPStatus, ae.Err.Error()
		} else {
			a.logger.Error("console: an action failed", zap.String("action", string(act)), zap.String("account", id), zap.Error(err))
		}
		if _, aerr := a.store.AppendAudit(r.Context(), ledger.AuditRecord{OperatorID: sc.op.ID, OperatorEmail: sc.op.Email,
			Action: string(act) + ".failed", AccountID: id, Detail: truncate(msg, 1000), Note: note}); aerr != nil {
			a.logger.Error("console: writing a failed action to the audit log", zap.Error(aerr))
		}
		a.errorPage(w, r, sc, status, "Not done", msg)
		return
	}
	http.Redirect(w, r, a.prefix+"/accounts/"+url.PathEscape(id)+"?done="+string(act), http.StatusSeeOther)
}

func (a *app) accountMissing(w http.ResponseWriter, r *http.Request, sc *sessionCtx, id string, err error) {
	if errors.Is(err, ledger.ErrNotFound) {
		a.errorPage(w, r, sc, http.StatusNotFound, "No such account", "No account has the id "+id+".")
		return
	}
	a.internalError(w, r, sc, "read the account", err)
}

// parseEUR reads an amount like "2", "2.5" or "2.50" as cents; "" is 0 (all that is left).
func parseEUR(s string) (int64, error) {
	s = strings.TrimSpace(strings.ReplaceAll(s, ",", "."))
	if s == "" {
		return 0, nil
	}
	if strings.Trim(s, "0123456789.") != "" {
		return 0, errors.New("not an amount")
	}
	whole, frac, _ := strings.Cut(s, ".")
	if len(frac) > 2 || whole == "" && frac == "" {
		return 0, errors.New("at most two decimals")
	}
	for len(frac) < 2 {
		frac += "0"
	}
	w, err := strconv.ParseInt(cmpOr(whole, "0"), 10, 64)
	if err != nil || w < 0 || w > 1_000_000 {
		return 0, errors.New("not an amount")
	}
	f, err := strconv.ParseInt(frac, 10, 64)
	if err != nil || f < 0 {
		return 0, errors.New("not an amount")
	}
	return w*100 + f, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func eurOrAll(cents int64) string {
	if cents == 0 {
		return "all that is left"
	}
	return funcs["eur"].(func(int64) string)(cents)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
