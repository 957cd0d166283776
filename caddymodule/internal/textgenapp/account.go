package textgenapp

import "sync"

// Where My Account serves the accounts of a ledger, so that the API's 402 (no credits left) can
// tell the client where to buy without a setting of its own: My Account records its address
// under its ledger's key when it is provisioned, and the textgen handler of the same config
// asks for it when it answers. One config, one app, so a reload starts afresh.

type accountAreas struct {
	mu    sync.Mutex
	where map[string]string // ledger key -> address of the account area
}

// SetAccountArea records where the account area of the ledger named ledgerKey is: its public
// address, or its path on the site.
func (a *App) SetAccountArea(ledgerKey, where string) {
	a.areas.mu.Lock()
	defer a.areas.mu.Unlock()
	a.areas.where[ledgerKey] = where
}

// AccountArea returns where the account area of the ledger named ledgerKey is, or "" if this
// config has none.
func (a *App) AccountArea(ledgerKey string) string {
	a.areas.mu.Lock()
	defer a.areas.mu.Unlock()
	return a.areas.where[ledgerKey]
}
