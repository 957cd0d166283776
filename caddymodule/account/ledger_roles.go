package account

import "github.com/caddy-textgen/textgen/ledger"

// accountLedger is what My Account asks of its ledger: the roles it uses, no more. The textgen
// app hands every module the whole ledger.Store, which satisfies it.
type accountLedger interface {
	ledger.Accounts
	ledger.Keys
	ledger.Credits
	ledger.Credentials
	ledger.Reports
	ledger.Mail
	ledger.Payments
	ledger.Reversals
	ledger.KeyReports
	ledger.Members
	ledger.Codes
	ledger.TopUps
	ledger.Alerts
}
