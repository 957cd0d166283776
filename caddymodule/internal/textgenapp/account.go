package textgenapp

import "sync"

// Where My Account serves the accounts of a ledger, and what it sells, so that the API's 402 (no
// credits left) can tell the client where to buy, and which packages, without a setting of its
// own: My Account records them under its ledger's key when it is provisioned, and the textgen
// handler of the same config asks for them when it answers. One config, one app, so a reload
// starts afresh.

type accountAreas struct {
	mu    sync.Mutex
	where map[string]AccountArea // ledger key -> its account area
}

// AccountArea is where an account area is and what it sells.
type AccountArea struct {
	// Where is its public address, or its path on the site.
	Where string
	// Packages names the credit packages on sale ("10 credits = 2.00 EUR"); empty when buying
	// is off.
	Packages []string
	// SiteName is My Account's site_name: the console of the same ledger shows it when it has
	// none of its own.
	SiteName string
}

// SetAccountArea records the account area of the ledger named ledgerKey.
func (a *App) SetAccountArea(ledgerKey string, area AccountArea) {
	a.areas.mu.Lock()
	defer a.areas.mu.Unlock()
	a.areas.where[ledgerKey] = area
}

// AccountArea returns the account area of the ledger named ledgerKey; its Where is "" if this
// config has none.
func (a *App) AccountArea(ledgerKey string) AccountArea {
	a.areas.mu.Lock()
	defer a.areas.mu.Unlock()
	return a.areas.where[ledgerKey]
}
