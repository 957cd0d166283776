package textgenapp

import "github.com/caddy-textgen/textgen/ledger"

// appLedger is what the app asks of a ledger outside its pool: the refunder and inviter
// registries only tell one ledger from another (an interface value compares by the store
// behind it, whatever roles its type names), and the app closes ledgers (Maintenance). The
// pool opens each ledger as the whole ledger.Store and hands that out, so it satisfies this and
// every module's own interface.
type appLedger interface {
	ledger.Maintenance
}
