// Package keytext says what is left of an API key's budgets in words, the same on My Account's
// keys page and in the operators' console.
package keytext

import (
	"fmt"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// BudgetLeft says what is left at t of each budget k has and when it resets ("" when it has
// none).
func BudgetLeft(k ledger.Key, t time.Time) string {
	if !k.HasBudget() {
		return ""
	}
	r := k.Remaining(t)
	var parts []string
	if r.Day != nil {
		parts = append(parts, fmt.Sprintf("%d of %d left today (until %s UTC)", *r.Day, k.BudgetDay, r.DayResets.UTC().Format("01-02 15:04")))
	}
	if r.Month != nil {
		parts = append(parts, fmt.Sprintf("%d of %d left this month (until %s)", *r.Month, k.BudgetMonth, r.MonthResets.UTC().Format("2006-01-02")))
	}
	if r.Total != nil {
		parts = append(parts, fmt.Sprintf("%d of %d left in all", *r.Total, k.BudgetTotal))
	}
	return strings.Join(parts, "; ")
}
