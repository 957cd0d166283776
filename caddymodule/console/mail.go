package console

import (
	"errors"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/operator"
	"github.com/caddy-textgen/textgen/ledger"
)

// The Mail page: the e-mail outbox (what waits, its attempts and last error, never its sealed
// content), and dropping a message that will never go out, with a note in the audit log.

type mailData struct {
	Messages []ledger.MailMessage
	Done     bool
}

func (a *app) mail(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	ms, err := a.store.ListMail(r.Context(), 1000)
	if err != nil {
		a.internalError(w, r, sc, "list the outbox", err)
		return
	}
	for i := range ms {
		ms[i].Sealed, ms[i].Claim = nil, ""
	}
	a.render(w, r, http.StatusOK, "mail", sc, page{Title: "E-mail outbox", Nav: "mail",
		Data: mailData{Messages: ms, Done: r.URL.Query().Get("done") != ""}})
}

func (a *app) dropMail(w http.ResponseWriter, r *http.Request, sc *sessionCtx, act action) {
	id := r.PathValue("id")
	note := strings.TrimSpace(r.PostFormValue("note"))
	if note == "" || len(note) > maxNote {
		a.errorPage(w, r, sc, http.StatusBadRequest, "Not done", "A note of at most 500 characters is required: say why. Nothing was changed.")
		return
	}
	var acct string
	ms, err := a.store.ListMail(r.Context(), 1000)
	if err != nil {
		a.internalError(w, r, sc, "list the outbox", err)
		return
	}
	found := false
	for _, m := range ms {
		if m.ID == id {
			acct, found = m.AccountID, true
		}
	}
	if !found {
		a.errorPage(w, r, sc, http.StatusNotFound, "No such e-mail", "No message "+id+" waits in the outbox: it went out or was dropped.")
		return
	}
	if _, err := a.store.AppendAudit(r.Context(), ledger.AuditRecord{OperatorID: sc.op.ID, OperatorEmail: sc.op.Email,
		Action: string(act), AccountID: acct, Detail: "e-mail " + id, Note: note}); err != nil {
		a.internalError(w, r, sc, "write the audit log (nothing was changed)", err)
		return
	}
	if err := operator.DropMail(r.Context(), a.store, id); err != nil {
		var ae caddy.APIError
		if errors.As(err, &ae) && ae.HTTPStatus == http.StatusNotFound {
			a.errorPage(w, r, sc, http.StatusNotFound, "No such e-mail", "No message "+id+" waits in the outbox: it went out or was dropped.")
			return
		}
		a.logger.Error("console: dropping e-mail", zap.String("id", id), zap.Error(err))
		a.internalError(w, r, sc, "drop the e-mail", err)
		return
	}
	http.Redirect(w, r, a.prefix+"/mail?done=1", http.StatusSeeOther)
}
