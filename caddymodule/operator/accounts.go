package operator

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/ledger"
)

// Accounts: POST /textgen/accounts, GET /textgen/accounts[/{id}], POST .../{id}/disable|enable.

func (adminAPI) createAccount(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req createAccountRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	email := strings.TrimSpace(req.Email)
	if email == "" {
		return badRequest("email is required")
	}
	testCredits := int64(defaultTestCredits)
	if req.TestCredits != nil {
		testCredits = *req.TestCredits
	}
	if testCredits < 0 || testCredits > 10_000 {
		return badRequest("test_credits must be between 0 and 10000")
	}
	acct, err := store.CreateAccount(r.Context(), email)
	if err != nil {
		if errors.Is(err, ledger.ErrDuplicateEmail) {
			return caddy.APIError{HTTPStatus: http.StatusConflict, Err: fmt.Errorf("an account with email %s exists already", email)}
		}
		return ledgerError(err, "creating account for %s", email)
	}
	if testCredits > 0 {
		if _, _, err := store.RefillTestCredits(r.Context(), acct.ID, testCredits); err != nil {
			return ledgerError(err, "granting the first test credits of account %s (it was created; grant them with caddy textgen credits grant --test)", acct.ID)
		}
	}
	return writeAdminJSON(w, http.StatusCreated, acct)
}

func (adminAPI) listAccounts(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	page, err := pageFromQuery(r)
	if err != nil {
		return err
	}
	accts, next, err := store.ListAccounts(r.Context(), page)
	if err != nil {
		return ledgerError(err, "listing accounts")
	}
	if accts == nil {
		accts = []ledger.Account{}
	}
	return writeAdminJSON(w, http.StatusOK, accountList{Accounts: accts, NextCursor: next})
}

func (adminAPI) getAccount(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	id := r.PathValue("id")
	acct, err := store.GetAccount(r.Context(), id)
	if err != nil {
		return accountError(err, id, "reading account %s", id)
	}
	bal, err := store.Balance(r.Context(), id)
	if err != nil {
		return accountError(err, id, "reading the balance of account %s", id)
	}
	keys, err := store.ListKeys(r.Context(), id)
	if err != nil {
		return accountError(err, id, "listing the keys of account %s", id)
	}
	disputes, err := store.ListReversals(r.Context(), id, ledger.ReversalDispute, 1000)
	if err != nil {
		return accountError(err, id, "listing the disputes of account %s", id)
	}
	d := accountDetail{Account: acct, Credits: bal, Keys: keyViews(keys), Disputes: disputes}
	if d.Disputes == nil {
		d.Disputes = []ledger.Reversal{}
	}
	for _, rv := range disputes {
		d.Disputed = d.Disputed || rv.Status == ledger.DisputeOpen || rv.Status == ledger.DisputeLost
	}
	return writeAdminJSON(w, http.StatusOK, d)
}

func (adminAPI) setStatus(status ledger.AccountStatus) adminFunc {
	return func(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
		if err := decodeAdminJSON(r, &struct{}{}, true); err != nil {
			return err
		}
		id := r.PathValue("id")
		action := "disable"
		if status == ledger.StatusActive {
			action = "enable"
		}
		var acct ledger.Account
		err := audited(r.Context(), store, action, id, "", "", func() (err error) {
			acct, err = SetStatus(r.Context(), store, id, status)
			return err
		})
		if err != nil {
			return err
		}
		return writeAdminJSON(w, http.StatusOK, acct)
	}
}

// accountError is ledgerError for a ledger call about account id. Every such call answers
// ErrNotFound when no account has id, so the routes ask the ledger once, with no lookup of the
// account first, and that answer becomes a 404 that names the id.
func accountError(err error, id, format string, args ...any) error {
	if errors.Is(err, ledger.ErrNotFound) {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("account %s not found", id)}
	}
	return ledgerError(err, format, args...)
}
