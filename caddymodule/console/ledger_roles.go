package console

import "github.com/caddy-textgen/textgen/ledger"

// consoleLedger is what the console asks of a ledger: what it shows (accounts, keys, credits,
// history, usage, payments, an organisation's members, the outbox, the state of the store), what it changes through the
// operator package's actions, and the operators with their sessions and audit log.
type consoleLedger interface {
	ledger.Accounts
	ledger.Keys
	ledger.Credits
	ledger.Reports
	ledger.Maintenance
	ledger.Mail
	ledger.Payments
	ledger.Reversals
	ledger.Members
	ledger.KeySearch
	ledger.MoneyReports
	ledger.Operators
	ledger.Codes
	ledger.TopUps
}
