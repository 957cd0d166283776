package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/keytext"
	"github.com/caddy-textgen/textgen/ledger"
)

// keyRow is a key on the account page, with its limits said in one line.
type keyRow struct {
	ledger.Key
	Limits string
}

// keyRows gives each key the line that says its limits at t: what is left of each budget and
// when it resets, its expiry, the tools and the address ranges it may use; "none" without any.
func keyRows(keys []ledger.Key, t time.Time) []keyRow {
	rows := make([]keyRow, len(keys))
	for i, k := range keys {
		rows[i] = keyRow{Key: k, Limits: keyLimits(k, t)}
	}
	return rows
}

func keyLimits(k ledger.Key, t time.Time) string {
	var parts []string
	day := func(x time.Time) string { return x.UTC().Format("2006-01-02 15:04 UTC") }
	if b := keytext.BudgetLeft(k, t); b != "" {
		parts = append(parts, b)
	}
	if !k.Expires.IsZero() {
		parts = append(parts, "expires "+day(k.Expires))
	}
	if len(k.AllowedTools) > 0 {
		parts = append(parts, "tools: "+strings.Join(k.AllowedTools, ", "))
	}
	if len(k.AllowedCIDRs) > 0 {
		parts = append(parts, "from: "+strings.Join(k.AllowedCIDRs, ", "))
	}
	if !k.GraceUntil.IsZero() && t.Before(k.GraceUntil) {
		parts = append(parts, fmt.Sprintf("rolled; the old secret …%s works until %s", k.PreviousLast4, day(k.GraceUntil)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
