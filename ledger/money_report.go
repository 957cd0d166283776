package ledger

import (
	"context"
	"fmt"
	"time"
)

// MoneyReports is what was paid and taken back across all accounts in a time range: the
// console's revenue per day and the accountant's export of a month. It reads the payments
// (RecordPayment) and reversals (Reverse) the ledger keeps, not the entries.
type MoneyReports interface {
	// MoneyBetween lists the payments created in [from, to) and the refunds and disputes
	// created in it, across accounts, each oldest first, at most limit of each (1 to
	// MaxMoneyList); Truncated says that one of them had more.
	//
	// Expected errors:
	//   - ErrInvalidArgument: to not after from, or limit out of range.
	//   - ErrClosed; ctx's error.
	MoneyBetween(ctx context.Context, from, to time.Time, limit int) (MoneyPeriod, error)
}

// MaxMoneyList is the most payments (and the most reversals) one MoneyBetween returns.
const MaxMoneyList = 100_000

// MoneyPeriod is what MoneyBetween found.
type MoneyPeriod struct {
	Payments  []Payment
	Reversals []Reversal
	Truncated bool
}

func MoneyArgs(from, to time.Time, limit int) error {
	if !to.After(from) {
		return fmt.Errorf("the end %s is not after the start %s: %w", to, from, ErrInvalidArgument)
	}
	if limit < 1 || limit > MaxMoneyList {
		return fmt.Errorf("limit %d is not 1 to %d: %w", limit, MaxMoneyList, ErrInvalidArgument)
	}
	return nil
}

func InPeriod(t, from, to time.Time) bool { return !t.Before(from) && t.Before(to) }
