package operator

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// inviteResponse is the answer of POST /textgen/accounts/{id}/invite.
type inviteResponse struct {
	AccountID string `json:"account_id"`
	Email     string `json:"email"`
	// Link is the single-use link (7 days) with which the account sets its password.
	Link string `json:"link"`
	// Mailed is true when the link was queued in an e-mail to the account (My Account has
	// smtp); false: hand the link over yourself.
	Mailed bool `json:"mailed"`
}

// invite asks My Account of the ledger to make (and e-mail) the account's invitation link: an
// account the operator made has no password, and this is how it gets one.
func (adminAPI) invite(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	if err := decodeAdminJSON(r, &struct{}{}, true); err != nil {
		return err
	}
	id := r.PathValue("id")
	inv := textgenapp.InviterFor(store)
	if inv == nil {
		return caddy.APIError{HTTPStatus: http.StatusConflict,
			Err: errors.New("no textgen_account serves this ledger: an invitation link needs My Account (add textgen_account with smtp to the site)")}
	}
	link, mailed, err := inv.Invite(r.Context(), id)
	if errors.Is(err, ledger.ErrAccountDisabled) {
		return caddy.APIError{HTTPStatus: http.StatusConflict, Err: fmt.Errorf("account %s is disabled; enable it first", id)}
	}
	if err != nil {
		return accountError(err, id, "inviting account %s", id)
	}
	acct, err := store.GetAccount(r.Context(), id)
	if err != nil {
		return accountError(err, id, "reading account %s", id)
	}
	return writeAdminJSON(w, http.StatusOK, inviteResponse{AccountID: acct.ID, Email: acct.Email, Link: link, Mailed: mailed})
}
