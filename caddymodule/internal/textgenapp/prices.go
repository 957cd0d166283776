package textgenapp

import (
	"slices"
	"strings"
	"sync"
)

// The tools' prices of a ledger, so that My Account can say what a request costs without a
// setting of its own: the textgen handler records them under its ledger's key when it is
// provisioned, and My Account of the same config reads them when it renders a page. One config,
// one app, so a reload starts afresh.

type toolPrices struct {
	mu    sync.Mutex
	price map[string][]ToolPrice // ledger key -> the tools that do not cost 1 credit
}

// ToolPrice is a tool whose price is not the default of 1 credit.
type ToolPrice struct {
	Tool    string
	Credits int64
}

// SetToolPrices records, for the ledger named ledgerKey, the prices of the tools that do not
// cost 1 credit (prices maps a tool's slug to its price). A second handler on the same ledger
// adds its own; where two name the same tool, the higher price is kept (what a customer may be
// charged at most).
func (a *App) SetToolPrices(ledgerKey string, prices map[string]int64) {
	a.prices.mu.Lock()
	defer a.prices.mu.Unlock()
	if a.prices.price == nil {
		a.prices.price = map[string][]ToolPrice{}
	}
	cur := a.prices.price[ledgerKey]
	for tool, c := range prices {
		if c == 1 {
			continue
		}
		i := slices.IndexFunc(cur, func(p ToolPrice) bool { return p.Tool == tool })
		switch {
		case i < 0:
			cur = append(cur, ToolPrice{Tool: tool, Credits: c})
		case cur[i].Credits < c:
			cur[i].Credits = c
		}
	}
	slices.SortFunc(cur, func(x, y ToolPrice) int { return strings.Compare(x.Tool, y.Tool) })
	a.prices.price[ledgerKey] = cur
}

// ToolPrices are the tools of the ledger named ledgerKey that do not cost 1 credit, by slug;
// none where every tool costs 1.
func (a *App) ToolPrices(ledgerKey string) []ToolPrice {
	a.prices.mu.Lock()
	defer a.prices.mu.Unlock()
	return slices.Clone(a.prices.price[ledgerKey])
}
