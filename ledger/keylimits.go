package ledger

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"
	"unicode/utf8"
)

// Keys with limits, for every engine: what a key may spend (a credit budget in total, per UTC
// calendar day, per UTC calendar month), which tools it may call and from which client
// addresses, and how its spending is counted.
//
// The count is kept beside the account's figures and changed in the same step as the hold:
// a hold counts against each of its key's windows while it is open, a settle keeps the count,
// a void gives it back. A window is the UTC day or month in which the hold was made: a void
// gives the credit back to that window only if the key's count still belongs to it (a hold of
// day D voided on day D+1, after the key's day count moved on to D+1, changes only the total
// and, within the same month, the month). A count never goes below zero.
//
// Only a key with a budget (HasBudget) is counted: a hold, settle or void of a key without one
// neither counts nor writes the key (nearly every key has none, and every request would pay
// for the write), and its Usage stays as it was. A budget set on a key that had none counts
// from that moment (CountFrom): the key's holds still open then, which the key's count gives
// back when they are voided, and nothing it spent before. The count is not rebuilt from the
// ledger's entries: the total would have to read every entry the key ever made. A change
// between budgets keeps the count; a key whose budget is removed keeps its last count until a
// budget is set again.

// Limits of the fields of a key's limits.
const (
	maxKeyNoteLen     = 500
	maxKeyAllowed     = 64 // tools or address ranges
	maxKeyAllowedLen  = 64 // bytes of one tool slug or CIDR
	maxKeyBudget      = 1 << 40
	MaxKeyRollGrace   = 7 * 24 * time.Hour
	BudgetTotal       = "total"
	BudgetDay         = "day"
	BudgetMonth       = "month"
	errBudgetExceeded = "key budget exhausted"
)

// ErrKeyBudgetExhausted: a hold on a key that has spent one of its budgets; nothing was
// written. The error is a *KeyBudgetError, which says which budget and when it resets.
var ErrKeyBudgetExhausted = errors.New(errBudgetExceeded)

// ErrKeyExpired: LookupKey of a key whose expiry has passed. Revoked, unknown and malformed
// keys are still ErrInvalidKey.
var ErrKeyExpired = errors.New("API key expired")

// KeyLimits are what a key may do; the zero value limits nothing.
type KeyLimits struct {
	// Note is the owner's free text about the key (at most 500 bytes).
	Note string `json:"note,omitempty"`
	// BudgetTotal, BudgetDay and BudgetMonth are the most credits the key may spend in all, in
	// one UTC calendar day and in one UTC calendar month; 0 is no budget.
	BudgetTotal int64 `json:"budget_total,omitempty"`
	BudgetDay   int64 `json:"budget_day,omitempty"`
	BudgetMonth int64 `json:"budget_month,omitempty"`
	// AllowedTools are the tool slugs the key may call; empty allows every tool.
	AllowedTools []string `json:"allowed_tools,omitempty"`
	// AllowedCIDRs are the client address ranges (IPv4 or IPv6 CIDR) the key may be used
	// from; empty allows every address.
	AllowedCIDRs []string `json:"allowed_cidrs,omitempty"`
}

// KeySettings are what the owner or the operator may change of a key (Keys.UpdateKey): all of
// them are replaced at once.
type KeySettings struct {
	Name    string
	Expires time.Time // zero: never
	Limits  KeyLimits
}

// KeyUsage is what a key has spent: credits held (while open) or settled.
type KeyUsage struct {
	Total int64 `json:"total"`
	// Day is the count of the UTC day that starts at DayStart (zero: none yet), Month that of
	// the UTC month that starts at MonthStart.
	Day        int64     `json:"day"`
	DayStart   time.Time `json:"day_start,omitzero"`
	Month      int64     `json:"month"`
	MonthStart time.Time `json:"month_start,omitzero"`
}

// KeyBudgetError is ErrKeyBudgetExhausted with what was exhausted.
type KeyBudgetError struct {
	Budget string // "total", "day" or "month"
	Limit  int64
	// Resets is when the budget has room again: the next UTC midnight or month; zero for the
	// total budget, which never resets.
	Resets time.Time
}

func (e *KeyBudgetError) Error() string {
	if e.Resets.IsZero() {
		return fmt.Sprintf("the key's total budget of %d credits is spent", e.Limit)
	}
	period := map[string]string{BudgetDay: "daily", BudgetMonth: "monthly"}[e.Budget]
	return fmt.Sprintf("the key's %s budget of %d credits is spent until %s", period, e.Limit, e.Resets.Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrKeyBudgetExhausted) true.
func (e *KeyBudgetError) Is(target error) bool { return target == ErrKeyBudgetExhausted }

// NewKeyBudgetError is the error of an exhausted budget b for a hold at t.
func NewKeyBudgetError(l KeyLimits, b string, t time.Time) *KeyBudgetError {
	switch b {
	case BudgetDay:
		return &KeyBudgetError{Budget: b, Limit: l.BudgetDay, Resets: dayStart(t).AddDate(0, 0, 1)}
	case BudgetMonth:
		return &KeyBudgetError{Budget: b, Limit: l.BudgetMonth, Resets: monthStart(t).AddDate(0, 1, 0)}
	}
	return &KeyBudgetError{Budget: BudgetTotal, Limit: l.BudgetTotal}
}

// dayStart and monthStart are the UTC calendar windows that hold t.
func dayStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// at is the usage as seen at t: a day or month count of an earlier window is zero.
func (u KeyUsage) at(t time.Time) KeyUsage {
	if d := dayStart(t); !u.DayStart.Equal(d) {
		u.Day, u.DayStart = 0, d
	}
	if m := monthStart(t); !u.MonthStart.Equal(m) {
		u.Month, u.MonthStart = 0, m
	}
	return u
}

// Charge counts n more credits at t, or says which budget of l has no room for them (""); the
// budget the caller is told about is the one that resets last (total, then month, then day),
// since that is when the key can spend again.
func (u KeyUsage) Charge(l KeyLimits, t time.Time, n int64) (KeyUsage, string) {
	u = u.at(t)
	switch {
	case l.BudgetTotal > 0 && u.Total+n > l.BudgetTotal:
		return u, BudgetTotal
	case l.BudgetMonth > 0 && u.Month+n > l.BudgetMonth:
		return u, BudgetMonth
	case l.BudgetDay > 0 && u.Day+n > l.BudgetDay:
		return u, BudgetDay
	}
	u.Total += n
	u.Day += n
	u.Month += n
	return u, ""
}

// Release gives back the n credits of a hold made at created (a void).
func (u KeyUsage) Release(created time.Time, n int64) KeyUsage {
	u.Total = max(u.Total-n, 0)
	if u.DayStart.Equal(dayStart(created)) {
		u.Day = max(u.Day-n, 0)
	}
	if u.MonthStart.Equal(monthStart(created)) {
		u.Month = max(u.Month-n, 0)
	}
	return u
}

// Retake counts again the n credits of a hold made at created that release gave back (a hold
// settled after its expiry's void): the key's budget was checked when the hold was made.
func (u KeyUsage) Retake(created time.Time, n int64) KeyUsage {
	u.Total += n
	if u.DayStart.Equal(dayStart(created)) {
		u.Day += n
	}
	if u.MonthStart.Equal(monthStart(created)) {
		u.Month += n
	}
	return u
}

// BudgetStarts reports whether a change of a key's limits from old to new sets a budget on a key
// that had none: its count then starts again (CountFrom).
func BudgetStarts(old, new KeyLimits) bool { return !old.HasBudget() && new.HasBudget() }

// OpenHold is one hold still open, as CountFrom counts it: when it was made and its credits.
type OpenHold struct {
	Created time.Time
	Credits int64
}

// CountFrom is the count, at t, of a key on which a budget is set at t while its holds open are
// still open: each counts as if it had been counted when it was made.
func CountFrom(open []OpenHold, t time.Time) KeyUsage {
	u := KeyUsage{}.at(t)
	for _, h := range open {
		n := HeldCredits(h.Credits)
		u.Total += n
		if dayStart(h.Created).Equal(u.DayStart) {
			u.Day += n
		}
		if monthStart(h.Created).Equal(u.MonthStart) {
			u.Month += n
		}
	}
	return u
}

// KeyRemaining is what is left of a key's budgets at one moment; a budget the key does not
// have is nil.
type KeyRemaining struct {
	Total *int64 `json:"total,omitempty"`
	Day   *int64 `json:"day,omitempty"`
	// DayResets and MonthResets are when the day's and the month's budgets start again.
	DayResets   time.Time `json:"day_resets,omitzero"`
	Month       *int64    `json:"month,omitempty"`
	MonthResets time.Time `json:"month_resets,omitzero"`
}

// Remaining is what is left of k's budgets at t.
func (k Key) Remaining(t time.Time) KeyRemaining {
	u := k.Usage.at(t)
	left := func(b, used int64) *int64 {
		if b <= 0 {
			return nil
		}
		v := max(b-used, 0)
		return &v
	}
	r := KeyRemaining{Total: left(k.BudgetTotal, u.Total), Day: left(k.BudgetDay, u.Day), Month: left(k.BudgetMonth, u.Month)}
	if r.Day != nil {
		r.DayResets = u.DayStart.AddDate(0, 0, 1)
	}
	if r.Month != nil {
		r.MonthResets = u.MonthStart.AddDate(0, 1, 0)
	}
	return r
}

// HasBudget reports whether the key has any credit budget.
func (l KeyLimits) HasBudget() bool { return l.BudgetTotal > 0 || l.BudgetDay > 0 || l.BudgetMonth > 0 }

// AllowsTool reports whether the key may call tool.
func (l KeyLimits) AllowsTool(tool string) bool {
	return len(l.AllowedTools) == 0 || slices.Contains(l.AllowedTools, tool)
}

// AllowsAddr reports whether the key may be used from addr (an IPv4-mapped IPv6 address is
// taken as its IPv4 address). An invalid addr is allowed only when the key has no ranges.
func (l KeyLimits) AllowsAddr(addr netip.Addr) bool {
	if len(l.AllowedCIDRs) == 0 {
		return true
	}
	addr = addr.Unmap()
	for _, c := range l.AllowedCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil && p.Contains(addr) {
			return true
		}
	}
	return false
}

// CheckKeySettings checks and normalises settings for a key at t: the expiry in the future
// (or unchanged from the key's current one, old), budgets not negative, the tools and ranges
// well formed, sorted and without repeats (a range as its masked form).
func CheckKeySettings(set KeySettings, old, t time.Time) (KeySettings, error) {
	if len(set.Name) > maxKeyNameLen || !utf8.ValidString(set.Name) {
		return set, fmt.Errorf("key name must be valid UTF-8 of at most %d bytes: %w", maxKeyNameLen, ErrInvalidArgument)
	}
	if !set.Expires.IsZero() {
		set.Expires = set.Expires.UTC()
		if !set.Expires.Equal(old) && !set.Expires.After(t) {
			return set, fmt.Errorf("key expiry %s is not in the future: %w", set.Expires, ErrInvalidArgument)
		}
	}
	l := &set.Limits
	if len(l.Note) > maxKeyNoteLen || !utf8.ValidString(l.Note) {
		return set, fmt.Errorf("key note must be valid UTF-8 of at most %d bytes: %w", maxKeyNoteLen, ErrInvalidArgument)
	}
	for _, b := range []int64{l.BudgetTotal, l.BudgetDay, l.BudgetMonth} {
		if b < 0 || b > maxKeyBudget {
			return set, fmt.Errorf("a key budget must be between 0 (none) and %d credits: %w", int64(maxKeyBudget), ErrInvalidArgument)
		}
	}
	if len(l.AllowedTools) > maxKeyAllowed || len(l.AllowedCIDRs) > maxKeyAllowed {
		return set, fmt.Errorf("a key may name at most %d tools and %d address ranges: %w", maxKeyAllowed, maxKeyAllowed, ErrInvalidArgument)
	}
	tools := make([]string, 0, len(l.AllowedTools))
	for _, tool := range l.AllowedTools {
		if tool == "" || len(tool) > maxKeyAllowedLen || !utf8.ValidString(tool) {
			return set, fmt.Errorf("allowed tool %q is not a tool slug: %w", tool, ErrInvalidArgument)
		}
		tools = append(tools, tool)
	}
	cidrs := make([]string, 0, len(l.AllowedCIDRs))
	for _, c := range l.AllowedCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil || len(c) > maxKeyAllowedLen {
			return set, fmt.Errorf("allowed address range %q is not a CIDR such as 203.0.113.0/24 or 2001:db8::/32: %w", c, ErrInvalidArgument)
		}
		cidrs = append(cidrs, p.Masked().String())
	}
	slices.Sort(tools)
	slices.Sort(cidrs)
	l.AllowedTools, l.AllowedCIDRs = NilIfEmpty(slices.Compact(tools)), NilIfEmpty(slices.Compact(cidrs))
	return set, nil
}

func NilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// CheckRollGrace checks the grace period of a roll.
func CheckRollGrace(grace time.Duration) error {
	if grace < 0 || grace > MaxKeyRollGrace {
		return fmt.Errorf("a roll's grace period must be between 0 and 7 days: %w", ErrInvalidArgument)
	}
	return nil
}
