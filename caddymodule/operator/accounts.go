package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/ledger"
)

// Accounts: POST /textgen/accounts, GET /textgen/accounts[/{id}], POST .../{id}/disable|enable.

func (adminAPI) createAccount(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	var req createAccountRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	email := strings.TrimSpace(req.Email)
	if email == "" {
		return badRequest("email is required")
	}
	acct, err := store.CreateAccount(r.Context(), email)
	if err != nil {
		if errors.Is(err, ledger.ErrDuplicateEmail) {
			return caddy.APIError{HTTPStatus: http.StatusConflict, Err: fmt.Errorf("an account with email %s exists already", email)}
		}
		return ledgerError(err, "creating account for %s", email)
	}
	return writeAdminJSON(w, http.StatusCreated, acct)
}

func (adminAPI) listAccounts(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
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

func (adminAPI) getAccount(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	acct, err := findAccount(r.Context(), store, r.PathValue("id"))
	if err != nil {
		return err
	}
	bal, err := store.Balance(r.Context(), acct.ID)
	if err != nil {
		return ledgerError(err, "reading the balance of account %s", acct.ID)
	}
	keys, err := store.ListKeys(r.Context(), acct.ID)
	if err != nil {
		return ledgerError(err, "listing the keys of account %s", acct.ID)
	}
	return writeAdminJSON(w, http.StatusOK, accountDetail{Account: acct, Credits: bal, Keys: keyViews(keys)})
}

func (adminAPI) setStatus(status ledger.AccountStatus) adminFunc {
	return func(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
		if err := decodeAdminJSON(r, &struct{}{}, true); err != nil {
			return err
		}
		acct, err := findAccount(r.Context(), store, r.PathValue("id"))
		if err != nil {
			return err
		}
		acct, err = store.SetAccountStatus(r.Context(), acct.ID, status)
		if err != nil {
			return ledgerError(err, "setting account %s %s", r.PathValue("id"), status)
		}
		return writeAdminJSON(w, http.StatusOK, acct)
	}
}

// findAccount returns the account or a 404 that names the id.
func findAccount(ctx context.Context, store ledger.Store, id string) (ledger.Account, error) {
	if strings.TrimSpace(id) == "" {
		return ledger.Account{}, badRequest("an account id is required")
	}
	acct, err := store.GetAccount(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.Account{}, caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("account %s not found", id)}
	}
	if err != nil {
		return ledger.Account{}, ledgerError(err, "reading account %s", id)
	}
	return acct, nil
}
