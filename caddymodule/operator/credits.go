package operator

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/ledger"
)

// Credits: POST /textgen/accounts/{id}/credits (a grant) and .../adjust (a correction).

func (a adminAPI) grant(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req grantRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	if req.Credits <= 0 || req.Credits > maxCreditsPerCall {
		return badRequest("credits: a grant is a whole number from 1 to %d; use adjust to remove credits", maxCreditsPerCall)
	}
	return a.credit(w, r, store, ledger.KindGrant, req)
}

func (a adminAPI) adjust(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req grantRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	if req.Credits == 0 || req.Credits > maxCreditsPerCall || req.Credits < -maxCreditsPerCall {
		return badRequest("credits: an adjustment is a non-zero whole number from -%d to %d", maxCreditsPerCall, maxCreditsPerCall)
	}
	if strings.TrimSpace(req.Reason) == "" {
		return badRequest("reason is required for an adjustment (it stays in the ledger)")
	}
	return a.credit(w, r, store, ledger.KindAdjustment, req)
}

func (adminAPI) credit(w http.ResponseWriter, r *http.Request, store operatorLedger, kind ledger.EntryKind, req grantRequest) error {
	mode, err := parseMode(req.Mode)
	if err != nil {
		return err
	}
	ref, reason := strings.TrimSpace(req.Reference), strings.TrimSpace(req.Reason)
	id := r.PathValue("id")
	res, err := store.Grant(r.Context(), ledger.GrantRequest{
		AccountID: id, Mode: mode, Kind: kind, Credits: req.Credits, Reference: ref, Reason: reason,
	})
	if err != nil {
		if errors.Is(err, ledger.ErrInsufficientCredits) {
			msg := fmt.Sprintf("refused: removing %d %s credits would take account %s below zero", -req.Credits, mode, id)
			if bal, berr := store.Balance(r.Context(), id); berr == nil {
				msg += fmt.Sprintf(" (balance %d, available %d)", byMode(mode, bal.Balance, bal.TestBalance), byMode(mode, bal.Available, bal.TestAvailable))
			}
			return caddy.APIError{HTTPStatus: http.StatusConflict, Err: errors.New(msg)}
		}
		return accountError(err, id, "crediting account %s", id)
	}
	out := creditsResult{
		AccountID: id, Kind: kind, Mode: mode, Credited: req.Credits, Reference: ref,
		Repeated: res.Repeated, Entry: res.Entry, Credits: res.Balance,
		Balance:   byMode(mode, res.Balance.Balance, res.Balance.TestBalance),
		Available: byMode(mode, res.Balance.Available, res.Balance.TestAvailable),
	}
	if res.Repeated {
		out.Credited = 0
	}
	return writeAdminJSON(w, http.StatusOK, out)
}

func byMode(mode ledger.Mode, live, test int64) int64 {
	if mode == ledger.Test {
		return test
	}
	return live
}
