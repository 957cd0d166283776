package operator

import (
	"net/http"

	"github.com/caddy-textgen/textgen/ledger"
)

// GET /textgen/accounts/{id}/usage/keys?from=&to=: an account's use per API key, tool and mode,
// with each key's name and last 4 characters (never the key).

// keyUsageReport is the answer.
type keyUsageReport struct {
	AccountID string          `json:"account_id"`
	From      string          `json:"from,omitempty"`
	To        string          `json:"to,omitempty"`
	Keys      []keyUsageEntry `json:"keys"`
}

type keyUsageEntry struct {
	ledger.KeyUsageRow
	Name    string `json:"name"`
	Last4   string `json:"last4"`
	Revoked bool   `json:"revoked"`
}

func (adminAPI) usageByKey(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	q := r.URL.Query()
	uq := ledger.UsageQuery{AccountID: r.PathValue("id")}
	var err error
	if s := q.Get("from"); s != "" {
		if uq.From, err = parseUsageTime(s, false); err != nil {
			return badRequest("from: %v", err)
		}
	}
	if s := q.Get("to"); s != "" {
		if uq.To, err = parseUsageTime(s, true); err != nil {
			return badRequest("to: %v", err)
		}
	}
	if !uq.From.IsZero() && !uq.To.IsZero() && uq.To.Before(uq.From) {
		return badRequest("to (%s) is before from (%s)", q.Get("to"), q.Get("from"))
	}
	rows, err := store.UsageByKey(r.Context(), uq)
	if err != nil {
		return accountError(err, uq.AccountID, "reading usage by key")
	}
	keys, err := store.ListKeys(r.Context(), uq.AccountID)
	if err != nil {
		return accountError(err, uq.AccountID, "reading the keys of account %s", uq.AccountID)
	}
	byID := map[string]ledger.Key{}
	for _, k := range keys {
		byID[k.ID] = k
	}
	rep := keyUsageReport{AccountID: uq.AccountID, From: q.Get("from"), To: q.Get("to"), Keys: make([]keyUsageEntry, 0, len(rows))}
	for _, row := range rows {
		k := byID[row.KeyID]
		rep.Keys = append(rep.Keys, keyUsageEntry{KeyUsageRow: row, Name: k.Name, Last4: k.Last4, Revoked: !k.Revoked.IsZero()})
	}
	return writeAdminJSON(w, http.StatusOK, rep)
}
