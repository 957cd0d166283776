package operator

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/caddymodule/internal/opauth"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// The operators of the web console: GET /textgen/operators, POST /textgen/operators (create:
// the answer carries the TOTP secret and recovery codes, once) and POST
// /textgen/operators/{id}/remove. Creating one needs the textgen_console of the ledger, whose
// key seals the TOTP secret. Both changes go into the audit log, under the admin API's name.

// adminAuditor is who the audit log names for what the admin API (and so the CLI) did.
var adminAuditor = ledger.AuditRecord{OperatorID: "admin_api", OperatorEmail: "caddy textgen (admin API)"}

func (adminAPI) listOperators(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	ops, err := store.ListOperators(r.Context())
	if err != nil {
		return ledgerError(err, "listing operators")
	}
	return writeAdminJSON(w, http.StatusOK, operatorList{Operators: ops})
}

func (adminAPI) createOperator(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req operatorRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	role := ledger.OperatorRole(strings.TrimSpace(req.Role))
	switch role {
	case ledger.OperatorViewer, ledger.OperatorSupport, ledger.OperatorOwner:
	default:
		return badRequest("role: %q is not viewer, support or owner", req.Role)
	}
	sealer := textgenapp.ConsoleSealerFor(store)
	if sealer == nil {
		return caddy.APIError{HTTPStatus: http.StatusConflict,
			Err: errors.New("no textgen_console serves this ledger: an operator's TOTP secret is sealed with the console's key, so add the console to the Caddyfile first")}
	}
	note := strings.TrimSpace(req.Note)
	if note == "" {
		note = "created with caddy textgen operator create"
	}
	rec := adminAuditor
	rec.Action, rec.Detail, rec.Note = "operator.create", fmt.Sprintf("%s as %s", strings.ToLower(strings.TrimSpace(req.Email)), role), note
	// The record first: a change of access is never made without it.
	if _, err := store.AppendAudit(r.Context(), rec); err != nil {
		return ledgerError(err, "writing the audit log")
	}
	en, err := opauth.Enroll(r.Context(), store, sealer, "textgen console", req.Email, role, req.Password)
	if errors.Is(err, ledger.ErrWeakPassword) {
		var wp *ledger.WeakPasswordError
		if errors.As(err, &wp) {
			return badRequest("password: %s", wp.Reason)
		}
	}
	if err != nil {
		return ledgerError(err, "creating operator %s", strings.TrimSpace(req.Email))
	}
	return writeAdminJSON(w, http.StatusOK, en)
}

func (adminAPI) removeOperator(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req struct {
		Note string `json:"note"`
	}
	if err := decodeAdminJSON(r, &req, true); err != nil {
		return err
	}
	id := r.PathValue("id")
	note := strings.TrimSpace(req.Note)
	if note == "" {
		note = "removed with caddy textgen operator remove"
	}
	rec := adminAuditor
	rec.Action, rec.Detail, rec.Note = "operator.remove", id, note
	if _, err := store.AppendAudit(r.Context(), rec); err != nil {
		return ledgerError(err, "writing the audit log")
	}
	if err := store.RemoveOperator(r.Context(), id); err != nil {
		return ledgerError(err, "removing operator %s", id)
	}
	return writeAdminJSON(w, http.StatusOK, map[string]any{"removed": id})
}

type operatorRequest struct {
	Email    string `json:"email"`
	Role     string `json:"role"`
	Password string `json:"password,omitempty"`
	Note     string `json:"note,omitempty"`
}

type operatorList struct {
	Operators []ledger.Operator `json:"operators"`
}
