package pgledger

import (
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// How the PostgreSQL engine's rows map to the ledger's types. Times are stored as unix
// nanoseconds (the schema says why); a time that is not set (a key that never expires) is NULL.

// pgNanos is t as stored: unix nanoseconds, or NULL (nil) for the zero time.
func pgNanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// pgTime is the time stored as ns, in UTC like every time the ledger hands out.
func pgTime(ns int64) time.Time { return time.Unix(0, ns).UTC() }

// pgTimeOrZero is pgTime for a nullable column.
func pgTimeOrZero(ns *int64) time.Time {
	if ns == nil {
		return time.Time{}
	}
	return pgTime(*ns)
}

// pgCol is a column and the value that stands for NULL where a function may return no row
// (a composite OUT value left NULL).
type pgCol struct{ name, zero string }

// pgEntryCols are the columns of an entry in the order entryRow reads them.
var pgEntryCols = []pgCol{
	{"account_id", "''"}, {"seq", "0"}, {"kind", "''"}, {"mode", "''"}, {"amount", "0"},
	{"balance_after", "0"}, {"available_after", "0"}, {"request_id", "''"}, {"key_id", "''"},
	{"tool", "''"}, {"reference", "''"}, {"reason", "''"}, {"amount_cents", "0"}, {"currency", "''"},
	{"at", "0"}, {"credits", "0"},
}

// pgList is a select list of cols, each prefixed with prefix (a table alias or a composite
// value) and, when nullable, in coalesce(..., zero).
func pgList(prefix string, cols []pgCol, nullable bool) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = prefix + c.name
		if nullable {
			parts[i] = "coalesce(" + parts[i] + ", " + c.zero + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// entryRow receives an entry's columns.
type entryRow struct {
	e  ledger.Entry
	at int64
}

func (r *entryRow) dest() []any {
	e := &r.e
	return []any{&e.AccountID, &e.Seq, &e.Kind, &e.Mode, &e.Amount, &e.BalanceAfter, &e.AvailableAfter,
		&e.RequestID, &e.KeyID, &e.Tool, &e.Reference, &e.Reason, &e.AmountCents, &e.Currency, &r.at, &e.Credits}
}

func (r *entryRow) entry() ledger.Entry {
	e := r.e
	e.Time = pgTime(r.at)
	return e
}

// scanEntry reads one entry row (pgEntryCols, nothing else).
func scanEntry(row pgx.CollectableRow) (ledger.Entry, error) {
	var r entryRow
	err := row.Scan(r.dest()...)
	return r.entry(), err
}

// pgAccountCols are an account's columns in the order accountRow reads them.
const pgAccountCols = "id, email, status, created, unverified, low_balance_alert, low_balance_notified"

// pgAccountColsA are pgAccountCols of a table aliased a.
const pgAccountColsA = "a.id, a.email, a.status, a.created, a.unverified, a.low_balance_alert, a.low_balance_notified"

type accountRow struct {
	a       ledger.Account
	created int64
}

func (r *accountRow) dest() []any {
	return []any{&r.a.ID, &r.a.Email, &r.a.Status, &r.created, &r.a.Unverified, &r.a.LowBalanceAlert, &r.a.LowBalanceNotified}
}

func (r *accountRow) account() ledger.Account {
	a := r.a
	a.Created = pgTime(r.created)
	return a
}

func scanAccount(row pgx.CollectableRow) (ledger.Account, error) {
	var r accountRow
	err := row.Scan(r.dest()...)
	return r.account(), err
}

// pgBalanceCols are an account's figures in the order balanceRow reads them.
var pgBalanceCols = []pgCol{{"balance", "0"}, {"held", "0"}, {"test_balance", "0"}, {"test_held", "0"}}

type balanceRow struct{ bal, held, testBal, testHeld int64 }

func (r *balanceRow) dest() []any { return []any{&r.bal, &r.held, &r.testBal, &r.testHeld} }

func (r *balanceRow) balance(acct string) ledger.Balance {
	return ledger.Balance{AccountID: acct, Balance: r.bal, Available: r.bal - r.held,
		TestBalance: r.testBal, TestAvailable: r.testBal - r.testHeld}
}
