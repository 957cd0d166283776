package operator

import "github.com/caddy-textgen/textgen/ledger"

// operatorLedger is what the admin API and the CLI's local commands ask of a ledger: the roles
// they use, no more. textgenapp.OpenLedgers hands out the whole ledger.Store, which satisfies
// it.
type operatorLedger interface {
	ledger.Accounts
	ledger.Keys
	ledger.Credits
	ledger.Reports
	ledger.Maintenance
	ledger.Mail
	ledger.Payments
	ledger.Reversals
	ledger.KeyReports
	ledger.Members
	ledger.Operators
	ledger.Codes
	ledger.Alerts
}
