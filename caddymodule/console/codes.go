package console

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/caddymodule/operator"
	"github.com/caddy-textgen/textgen/ledger"
)

// The Codes page: redemption codes worth credits. An owner creates one (the page that answers
// the form shows the code, once: the ledger keeps only its digest); support and owners disable
// one; every role sees the list and who redeemed each code. Each change is in the audit log
// first, as every action of the console is.

type codesData struct {
	Codes []codeRow
	// Created is the code just made, shown on this answer only.
	Created     string
	CreatedCode *codeRow
	Done        string
}

type codeRow struct {
	ledger.RedemptionCode
	State string
}

type codeData struct {
	Code        codeRow
	Redemptions []ledger.CodeRedemption
}

func codeRowOf(c ledger.RedemptionCode) codeRow {
	return codeRow{RedemptionCode: c, State: c.State(now())}
}

func (a *app) codes(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	a.renderCodes(w, r, sc, http.StatusOK, codesData{Done: r.URL.Query().Get("done")})
}

func (a *app) renderCodes(w http.ResponseWriter, r *http.Request, sc *sessionCtx, status int, d codesData) {
	cs, err := a.store.ListCodes(r.Context(), 1000)
	if err != nil {
		a.internalError(w, r, sc, "list the codes", err)
		return
	}
	for _, c := range cs {
		d.Codes = append(d.Codes, codeRowOf(c))
	}
	a.render(w, r, status, "codes", sc, page{Title: "Codes", Nav: "codes", Data: d})
}

func (a *app) code(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	id := r.PathValue("id")
	c, err := a.store.GetCode(r.Context(), id)
	if errors.Is(err, ledger.ErrNotFound) {
		a.errorPage(w, r, sc, http.StatusNotFound, "No such code", "There is no code "+id+".")
		return
	}
	if err != nil {
		a.internalError(w, r, sc, "read the code", err)
		return
	}
	reds, err := a.store.CodeRedemptions(r.Context(), id, 1000)
	if err != nil {
		a.internalError(w, r, sc, "list the code's redemptions", err)
		return
	}
	a.render(w, r, http.StatusOK, "code", sc, page{Title: "Code " + id, Nav: "codes", Data: codeData{Code: codeRowOf(c), Redemptions: reds}})
}

// createCode makes a code from the form and shows it, once.
func (a *app) createCode(w http.ResponseWriter, r *http.Request, sc *sessionCtx, act action) {
	bad := func(msg string) { a.errorPage(w, r, sc, http.StatusBadRequest, "Not done", msg+" No code was made.") }
	note := strings.TrimSpace(r.PostFormValue("note"))
	if note == "" || len(note) > 200 {
		bad("A note of at most 200 characters is required: say what the code is for (it is shown in the list and the audit log).")
		return
	}
	credits, err := strconv.ParseInt(strings.TrimSpace(r.PostFormValue("credits")), 10, 64)
	if err != nil || credits < 1 || credits > ledger.MaxCodeCredits {
		bad(fmt.Sprintf("Credits must be a whole number from 1 to %d.", ledger.MaxCodeCredits))
		return
	}
	uses, err := strconv.ParseInt(cmpOr(strings.TrimSpace(r.PostFormValue("uses")), "1"), 10, 64)
	if err != nil || uses < 1 || uses > ledger.MaxCodeUses {
		bad(fmt.Sprintf("Uses must be a whole number from 1 to %d.", ledger.MaxCodeUses))
		return
	}
	var expires time.Time
	if s := strings.TrimSpace(r.PostFormValue("expires")); s != "" {
		d, err := time.Parse("2006-01-02", s)
		if err != nil {
			bad("The expiry is a date (YYYY-MM-DD), or empty for none.")
			return
		}
		expires = d.Add(24 * time.Hour) // the end of that day, UTC
		if !expires.After(time.Now()) {
			bad("The expiry is in the past.")
			return
		}
	}
	detail := fmt.Sprintf("%d credits, %d uses", credits, uses)
	if !expires.IsZero() {
		detail += ", expires " + expires.Format(time.RFC3339)
	}
	if _, err := a.store.AppendAudit(r.Context(), ledger.AuditRecord{OperatorID: sc.op.ID, OperatorEmail: sc.op.Email,
		Action: string(act), Detail: detail, Note: note}); err != nil {
		a.internalError(w, r, sc, "write the audit log (nothing was changed)", err)
		return
	}
	code, c, err := operator.CreateCode(r.Context(), a.store, credits, uses, expires, note)
	if err != nil {
		a.codeFailed(w, r, sc, act, detail, note, err)
		return
	}
	_, _ = a.store.AppendAudit(r.Context(), ledger.AuditRecord{OperatorID: sc.op.ID, OperatorEmail: sc.op.Email,
		Action: "code.created", Detail: c.ID + ": " + detail, Note: note})
	cr := codeRowOf(c)
	a.renderCodes(w, r, sc, http.StatusOK, codesData{Created: code, CreatedCode: &cr})
}

func (a *app) disableCode(w http.ResponseWriter, r *http.Request, sc *sessionCtx, act action) {
	id := r.PathValue("id")
	note := strings.TrimSpace(r.PostFormValue("note"))
	if note == "" || len(note) > maxNote {
		a.errorPage(w, r, sc, http.StatusBadRequest, "Not done", "A note of at most 500 characters is required: say why. Nothing was changed.")
		return
	}
	if _, err := a.store.GetCode(r.Context(), id); err != nil {
		if errors.Is(err, ledger.ErrNotFound) {
			a.errorPage(w, r, sc, http.StatusNotFound, "No such code", "There is no code "+id+". Nothing was changed.")
			return
		}
		a.internalError(w, r, sc, "read the code", err)
		return
	}
	if _, err := a.store.AppendAudit(r.Context(), ledger.AuditRecord{OperatorID: sc.op.ID, OperatorEmail: sc.op.Email,
		Action: string(act), Detail: id, Note: note}); err != nil {
		a.internalError(w, r, sc, "write the audit log (nothing was changed)", err)
		return
	}
	if _, err := operator.DisableCode(r.Context(), a.store, id); err != nil {
		a.codeFailed(w, r, sc, act, id, note, err)
		return
	}
	http.Redirect(w, r, a.prefix+"/codes?done=disabled", http.StatusSeeOther)
}

// codeFailed records and answers a code action that failed after its audit record.
func (a *app) codeFailed(w http.ResponseWriter, r *http.Request, sc *sessionCtx, act action, detail, note string, err error) {
	status, msg := http.StatusInternalServerError, "The server could not do it; the log says why."
	var ae caddy.APIError
	if errors.As(err, &ae) && ae.HTTPStatus > 0 && ae.HTTPStatus < 500 {
		status, msg = ae.HTTPStatus, ae.Err.Error()
	} else {
		a.logger.Error("console: a code action failed: " + string(act) + " " + detail + ": " + err.Error())
	}
	_, _ = a.store.AppendAudit(r.Context(), ledger.AuditRecord{OperatorID: sc.op.ID, OperatorEmail: sc.op.Email,
		Action: string(act) + ".failed", Detail: truncate(detail+": "+msg, 1000), Note: note})
	a.errorPage(w, r, sc, status, "Not done", msg)
}
