package console

import (
	"context"
	"errors"

	"github.com/caddy-textgen/textgen/ledger"
)

// Finding an account by one of its API keys, as the customer sees it: the hint
// "tg_live_…abcd", its last 4 characters, or its key id (ledger.FindKeys). The last 4
// characters are not unique, so several keys may match: the Accounts page lists them.

// keySearchLimit is the most keys one search lists.
const keySearchLimit = 50

// keyMatch is a key a search found, with its account's e-mail.
type keyMatch struct {
	ledger.Key
	Email string
}

// findKeys searches by hint q: the keys found, the account id when exactly one account has
// them (the page goes there), or a message for the operator.
func (a *app) findKeys(ctx context.Context, q string) (found []keyMatch, only, message string, err error) {
	if _, err := ledger.ParseKeyHint(q); err != nil {
		return nil, "", "Search by an e-mail address, an account id (acct_…), a key id (key_…), a key's hint (tg_live_…abcd) or its last 4 characters.", nil
	}
	keys, err := a.store.FindKeys(ctx, q, keySearchLimit)
	if err != nil {
		return nil, "", "", err
	}
	if len(keys) == 0 {
		return nil, "", "No key matches " + q + ".", nil
	}
	emails := map[string]string{}
	for _, k := range keys {
		if _, ok := emails[k.AccountID]; ok {
			continue
		}
		acct, err := a.store.GetAccount(ctx, k.AccountID)
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return nil, "", "", err
		}
		emails[k.AccountID] = acct.Email
		only = k.AccountID
	}
	if len(emails) == 1 {
		return nil, only, "", nil
	}
	for _, k := range keys {
		found = append(found, keyMatch{Key: k, Email: emails[k.AccountID]})
	}
	msg := ""
	if len(keys) == keySearchLimit {
		msg = "The newest keys that match are shown; a longer hint finds fewer."
	}
	return found, "", msg, nil
}
