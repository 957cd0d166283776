package ledgertest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Keys with limits and rolls (ledger/keylimits.go): what every engine must do.

// HoldOn holds one live credit for rid on key kid of acct.
func HoldOn(s ledger.Store, acct, kid, rid string) error {
	_, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: rid, KeyID: kid, Tool: "summarize"})
	return err
}

// WantBudget fails unless err is a *KeyBudgetError for budget b resetting at resets.
func WantBudget(t *testing.T, err error, b string, limit int64, resets time.Time) {
	t.Helper()
	var be *ledger.KeyBudgetError
	if !errors.As(err, &be) || !errors.Is(err, ledger.ErrKeyBudgetExhausted) || be.Budget != b || be.Limit != limit || !be.Resets.Equal(resets) {
		t.Fatalf("hold: %v (%+v), want the %s budget of %d exhausted until %v", err, be, b, limit, resets)
	}
}

// MustKeyOf is the key kid of acct as ListKeys shows it, failing the test if it is missing.
func MustKeyOf(t *testing.T, s ledger.Store, acct, kid string) ledger.Key {
	t.Helper()
	keys, err := s.ListKeys(bg, acct)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.ID == kid {
			return k
		}
	}
	t.Fatalf("no key %s", kid)
	return ledger.Key{}
}

func testKeyBudgets(t *testing.T, eng engine) {
	t0 := time.Date(2030, 1, 30, 22, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "budget@example.com")
	MustGrant(t, s, a.ID, ledger.Live, 100)
	full, k, err := s.CreateKey(bg, a.ID, ledger.Live, "ci", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// A key made without limits has none and spends freely.
	if k.HasBudget() || k.AllowedTools != nil || k.AllowedCIDRs != nil || k.Note != "" || k.Usage != (ledger.KeyUsage{}) {
		t.Fatalf("new key has limits: %+v", k)
	}
	if r := k.Remaining(t0); r.Total != nil || r.Day != nil || r.Month != nil {
		t.Fatalf("new key's remaining: %+v", r)
	}
	k, err = s.UpdateKey(bg, a.ID, k.ID, ledger.KeySettings{Name: "ci", Limits: ledger.KeyLimits{BudgetTotal: 5, BudgetDay: 2, BudgetMonth: 3, Note: "the build"}})
	if err != nil || k.BudgetTotal != 5 || k.BudgetDay != 2 || k.BudgetMonth != 3 || k.Note != "the build" {
		t.Fatalf("update: %+v %v", k, err)
	}
	jan31, feb1 := time.Date(2030, 1, 31, 0, 0, 0, 0, time.UTC), time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC)

	// Day D (January 30): two holds fit the day's budget of 2, a third does not, and costs nothing.
	for _, rid := range []string{"r1", "r2"} {
		if err := HoldOn(s, a.ID, k.ID, rid); err != nil {
			t.Fatal(rid, err)
		}
	}
	WantBudget(t, HoldOn(s, a.ID, k.ID, "r3"), "day", 2, jan31)
	if b, _ := s.Balance(bg, a.ID); b.Available != 98 {
		t.Fatalf("a refused hold took credit: %+v", b)
	}
	if _, err := s.GetHold(bg, a.ID, "r3"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a refused hold was written: %v", err)
	}
	// A void gives the credit back to the day; a settle keeps it.
	if _, err := s.Void(bg, a.ID, "r2", "backend"); err != nil {
		t.Fatal(err)
	}
	if err := HoldOn(s, a.ID, k.ID, "r3"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(bg, a.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	WantBudget(t, HoldOn(s, a.ID, k.ID, "r4"), "day", 2, jan31)
	got := MustKeyOf(t, s, a.ID, k.ID)
	if u := got.Usage; u.Total != 2 || u.Day != 2 || u.Month != 2 || !u.DayStart.Equal(time.Date(2030, 1, 30, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("usage on day D: %+v", u)
	}
	if r := got.Remaining(t0); *r.Total != 3 || *r.Day != 0 || *r.Month != 1 || !r.DayResets.Equal(jan31) || !r.MonthResets.Equal(feb1) {
		t.Fatalf("remaining on day D: %+v", r)
	}

	// Day D+1: the day's window starts again, the month's does not.
	t0 = jan31.Add(time.Hour)
	if r := MustKeyOf(t, s, a.ID, k.ID).Remaining(t0); *r.Day != 2 || *r.Month != 1 {
		t.Fatalf("remaining on day D+1: %+v", r)
	}
	if err := HoldOn(s, a.ID, k.ID, "r4"); err != nil {
		t.Fatal(err)
	}
	WantBudget(t, HoldOn(s, a.ID, k.ID, "r5"), "month", 3, feb1)
	// Voiding on D+1 the hold r3 of day D: the total and the month get it back, D+1's day count
	// (which r3 was never part of) does not.
	if _, err := s.Void(bg, a.ID, "r3", "client left"); err != nil {
		t.Fatal(err)
	}
	if u := MustKeyOf(t, s, a.ID, k.ID).Usage; u.Total != 2 || u.Day != 1 || u.Month != 2 || !u.DayStart.Equal(jan31) {
		t.Fatalf("usage after voiding a hold of the day before: %+v", u)
	}
	if err := HoldOn(s, a.ID, k.ID, "r5"); err != nil {
		t.Fatal(err)
	}
	WantBudget(t, HoldOn(s, a.ID, k.ID, "r6"), "month", 3, feb1)

	// A new month: day and month start again; the total (5) does not.
	for _, rid := range []string{"r4", "r5"} {
		if _, err := s.Settle(bg, a.ID, rid); err != nil {
			t.Fatal(err)
		}
	}
	t0 = feb1
	for _, rid := range []string{"r6", "r7"} {
		if err := HoldOn(s, a.ID, k.ID, rid); err != nil {
			t.Fatal(rid, err)
		}
	}
	WantBudget(t, HoldOn(s, a.ID, k.ID, "r8"), "total", 5, time.Time{})
	// An expired hold is voided by the sweep and gives its credit back like a void.
	t0 = t0.Add(ledger.DefaultHoldTTL)
	if n, err := eng.expire(t, s); err != nil || n != 2 {
		t.Fatalf("expire: %d %v", n, err)
	}
	if u := MustKeyOf(t, s, a.ID, k.ID).Usage; u.Total != 3 || u.Month != 0 || u.Day != 0 {
		t.Fatalf("usage after the sweep: %+v", u)
	}
	if err := HoldOn(s, a.ID, k.ID, "r8"); err != nil {
		t.Fatal(err)
	}
	// A key of another account named in a hold is neither counted nor refused.
	b := MustAccount(t, s, "other@example.com")
	MustGrant(t, s, b.ID, ledger.Live, 10)
	for i := range 6 {
		if err := HoldOn(s, b.ID, k.ID, fmt.Sprint("b", i)); err != nil {
			t.Fatal(err)
		}
	}
	// LookupKey reports the usage too, and the account's figures are right.
	lk, _, err := s.LookupKey(bg, full)
	if err != nil || lk.Usage.Total != 4 || lk.BudgetTotal != 5 {
		t.Fatalf("lookup: %+v %v", lk, err)
	}
	if bal, _ := s.Balance(bg, a.ID); bal.Balance != 97 || bal.Available != 96 {
		t.Fatalf("balance: %+v", bal)
	}
	VerifyClean(t, s)
}

// testKeyCountOnlyWithBudget: a key without a budget is not counted (its usage stays as it was
// through holds, settles and voids); a budget set on it counts from then, its holds still open
// included, and is exact from there; a budget removed leaves the count as it was, and one set
// again counts afresh.
func testKeyCountOnlyWithBudget(t *testing.T, eng engine) {
	t0 := time.Date(2030, 4, 30, 23, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "uncounted@example.com").ID
	MustGrant(t, s, a, ledger.Live, 100)
	_, k, err := s.CreateKey(bg, a, ledger.Live, "free", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	settle := func(rid string) {
		t.Helper()
		_, err := s.Settle(bg, a, rid)
		must(err)
	}
	void := func(rid string) {
		t.Helper()
		_, err := s.Void(bg, a, rid, "test")
		must(err)
	}
	update := func(l ledger.KeyLimits) {
		t.Helper()
		_, err := s.UpdateKey(bg, a, k.ID, ledger.KeySettings{Name: "free", Limits: l})
		must(err)
	}
	wantUsage := func(step string, total, day, month int64) {
		t.Helper()
		u := MustKeyOf(t, s, a, k.ID).Usage
		if u.Total != total || u.Day != day || u.Month != month {
			t.Fatalf("%s: usage %+v, want total %d, day %d, month %d", step, u, total, day, month)
		}
	}
	// Without a budget: nothing is counted.
	must(HoldOn(s, a, k.ID, "r1"))
	must(HoldOn(s, a, k.ID, "r2"))
	must(HoldOn(s, a, k.ID, "r3"))
	settle("r2")
	void("r3")
	t0 = t0.Add(30 * time.Minute)
	must(HoldOn(s, a, k.ID, "r4"))
	if u := MustKeyOf(t, s, a, k.ID).Usage; u != (ledger.KeyUsage{}) {
		t.Fatalf("a key without a budget counts %+v", u)
	}
	// The next day and month: a budget set now counts the key's open holds (r1 and r4 of April
	// in the total, r5 in every window) and nothing settled or voided before.
	t0 = time.Date(2030, 5, 1, 0, 30, 0, 0, time.UTC)
	must(HoldOn(s, a, k.ID, "r5"))
	update(ledger.KeyLimits{BudgetTotal: 4, BudgetDay: 2, BudgetMonth: 10})
	wantUsage("budget set with three holds open", 3, 1, 1)
	if u := MustKeyOf(t, s, a, k.ID).Usage; !u.DayStart.Equal(t0.Truncate(24*time.Hour)) || !u.MonthStart.Equal(t0.Truncate(24*time.Hour)) {
		t.Fatalf("windows of a budget set on %s: %+v", t0, u)
	}
	void("r1") // counted when the budget was set: given back to the total (April is not May)
	settle("r4")
	wantUsage("open holds of before the budget resolved", 2, 1, 1)
	must(HoldOn(s, a, k.ID, "r6"))
	wantUsage("a hold under the budget", 3, 2, 2)
	WantBudget(t, HoldOn(s, a, k.ID, "r7"), "day", 2, time.Date(2030, 5, 2, 0, 0, 0, 0, time.UTC))
	// The budget removed: the count stays as it was, whatever the key does.
	update(ledger.KeyLimits{})
	must(HoldOn(s, a, k.ID, "r8"))
	must(HoldOn(s, a, k.ID, "r7"))
	void("r5")
	settle("r6")
	settle("r7")
	wantUsage("budget removed", 3, 2, 2)
	// Set again: counted afresh, from the one hold open (r8).
	update(ledger.KeyLimits{BudgetTotal: 2})
	wantUsage("budget set again", 1, 1, 1)
	must(HoldOn(s, a, k.ID, "r9"))
	WantBudget(t, HoldOn(s, a, k.ID, "r10"), "total", 2, time.Time{})
	void("r8")
	must(HoldOn(s, a, k.ID, "r10"))
	wantUsage("after a void of a hold counted when the budget was set", 2, 2, 2)
	// A change between budgets keeps the count.
	update(ledger.KeyLimits{BudgetDay: 5})
	wantUsage("budget changed", 2, 2, 2)
	VerifyClean(t, s)
}

// testKeyBudgetConcurrent: N holds racing on a key with a budget of B: exactly B get through.
func testKeyBudgetConcurrent(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "race@example.com")
	MustGrant(t, s, a.ID, ledger.Live, 1000)
	_, k, err := s.CreateKey(bg, a.ID, ledger.Live, "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateKey(bg, a.ID, k.ID, ledger.KeySettings{Limits: ledger.KeyLimits{BudgetDay: 37}}); err != nil {
		t.Fatal(err)
	}
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			switch err := HoldOn(s, a.ID, k.ID, fmt.Sprint("r", i)); {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ledger.ErrKeyBudgetExhausted):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 37 || refused.Load() != 163 {
		t.Fatalf("%d holds and %d refusals, want 37 and 163", ok.Load(), refused.Load())
	}
	if b, _ := s.Balance(bg, a.ID); b.Available != 1000-37 {
		t.Fatalf("balance %+v", b)
	}
	VerifyClean(t, s)
}

func testKeyRoll(t *testing.T, eng engine) {
	t0 := time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "roll@example.com")
	MustGrant(t, s, a.ID, ledger.Live, 10)
	old, k, err := s.CreateKey(bg, a.ID, ledger.Live, "server", t0.Add(30*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	lim := ledger.KeyLimits{BudgetDay: 3, AllowedTools: []string{"summarize"}, AllowedCIDRs: []string{"10.0.0.0/8"}}
	if _, err := s.UpdateKey(bg, a.ID, k.ID, ledger.KeySettings{Name: "server", Expires: k.Expires, Limits: lim}); err != nil {
		t.Fatal(err)
	}
	for _, rid := range []string{"r1", "r2"} {
		if err := HoldOn(s, a.ID, k.ID, rid); err != nil {
			t.Fatal(err)
		}
	}
	t0 = t0.Add(time.Minute)
	nw, rk, err := s.RollKey(bg, a.ID, k.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := ledger.CheckKeyFormat(nw); !ok || m != ledger.Live || nw == old {
		t.Fatalf("rolled key %q", nw)
	}
	// The same key id, its limits, expiry and usage carried over; the previous secret is named.
	if rk.ID != k.ID || rk.BudgetDay != 3 || rk.AllowedTools[0] != "summarize" || rk.AllowedCIDRs[0] != "10.0.0.0/8" ||
		!rk.Expires.Equal(k.Expires) || rk.Usage.Day != 2 || rk.Last4 != nw[len(nw)-4:] || rk.PreviousLast4 != old[len(old)-4:] ||
		!rk.GraceUntil.Equal(t0.Add(time.Hour)) || !rk.Rolled.Equal(t0) {
		t.Fatalf("rolled key %+v", rk)
	}
	if l := MustKeyOf(t, s, a.ID, k.ID); l.Usage.Day != 2 || l.Last4 != rk.Last4 || !l.GraceUntil.Equal(rk.GraceUntil) {
		t.Fatalf("listed after the roll: %+v", l)
	}
	// Both secrets find the key within the grace period; a roll never resets the budget.
	for _, full := range []string{old, nw} {
		if got, _, err := s.LookupKey(bg, full); err != nil || got.ID != k.ID {
			t.Fatalf("lookup within grace: %+v %v", got, err)
		}
	}
	if err := HoldOn(s, a.ID, k.ID, "r3"); err != nil {
		t.Fatal(err)
	}
	WantBudget(t, HoldOn(s, a.ID, k.ID, "r4"), "day", 3, time.Date(2030, 3, 2, 0, 0, 0, 0, time.UTC))
	// After the grace period only the new secret works.
	t0 = t0.Add(time.Hour)
	if _, _, err := s.LookupKey(bg, old); err != ledger.ErrInvalidKey {
		t.Fatalf("previous secret after its grace: %v", err)
	}
	if _, _, err := s.LookupKey(bg, nw); err != nil {
		t.Fatal(err)
	}
	// A second roll within a grace period: the secret that was in its grace stops at once.
	second, _, err := s.RollKey(bg, a.ID, k.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	third, rk3, err := s.RollKey(bg, a.ID, k.ID, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if rk3.PreviousLast4 != second[len(second)-4:] || !rk3.GraceUntil.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("third roll %+v", rk3)
	}
	for full, want := range map[string]error{old: ledger.ErrInvalidKey, nw: ledger.ErrInvalidKey, second: nil, third: nil} {
		if _, _, err := s.LookupKey(bg, full); err != want {
			t.Fatalf("lookup of %s after two rolls: %v, want %v", full[len(full)-4:], err, want)
		}
	}
	// A roll without grace stops the replaced secret (and the one in its grace) at once.
	fourth, rk4, err := s.RollKey(bg, a.ID, k.ID, 0)
	if err != nil || rk4.PreviousLast4 != "" || !rk4.GraceUntil.IsZero() {
		t.Fatalf("roll without grace: %+v %v", rk4, err)
	}
	for full, want := range map[string]error{second: ledger.ErrInvalidKey, third: ledger.ErrInvalidKey, fourth: nil} {
		if _, _, err := s.LookupKey(bg, full); err != want {
			t.Fatalf("lookup of %s after a roll without grace: %v, want %v", full[len(full)-4:], err, want)
		}
	}
	// Bad arguments; a revoked key cannot be rolled, and revoking it stops every secret.
	for _, g := range []time.Duration{-time.Second, ledger.MaxKeyRollGrace + time.Second} {
		_, _, err := s.RollKey(bg, a.ID, k.ID, g)
		WantErr(t, err, ledger.ErrInvalidArgument)
	}
	_, _, err = s.RollKey(bg, a.ID, "key_000000000000", 0)
	WantErr(t, err, ledger.ErrNotFound)
	fifth, _, err := s.RollKey(bg, a.ID, k.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeKey(bg, a.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	for _, full := range []string{fourth, fifth} {
		if _, _, err := s.LookupKey(bg, full); err != ledger.ErrInvalidKey {
			t.Fatalf("lookup of a revoked rolled key: %v", err)
		}
	}
	_, _, err = s.RollKey(bg, a.ID, k.ID, 0)
	WantErr(t, err, ledger.ErrAlreadyRevoked)
	for _, rid := range []string{"r1", "r2", "r3"} {
		if _, err := s.Settle(bg, a.ID, rid); err != nil {
			t.Fatal(err)
		}
	}
	// No secret reaches the store in clear.
	assertNotStored(t, eng, s, old, nw, second, third, fourth, fifth)
	VerifyClean(t, s)
}

func testKeyUpdate(t *testing.T, eng engine) {
	t0 := time.Date(2030, 5, 1, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "limits@example.com")
	full, k, err := s.CreateKey(bg, a.ID, ledger.Test, "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// Tools and ranges are kept sorted, once each, a range in its masked form.
	got, err := s.UpdateKey(bg, a.ID, k.ID, ledger.KeySettings{Name: "renamed", Expires: t0.Add(time.Hour), Limits: ledger.KeyLimits{
		AllowedTools: []string{"translate", "summarize", "translate"},
		AllowedCIDRs: []string{"2001:db8::1/32", "192.0.2.7/24"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "renamed" || !got.Expires.Equal(t0.Add(time.Hour)) || strings.Join(got.AllowedTools, ",") != "summarize,translate" ||
		strings.Join(got.AllowedCIDRs, ",") != "192.0.2.0/24,2001:db8::/32" {
		t.Fatalf("update: %+v", got)
	}
	if l := MustKeyOf(t, s, a.ID, k.ID); strings.Join(l.AllowedCIDRs, ",") != "192.0.2.0/24,2001:db8::/32" || l.Name != "renamed" {
		t.Fatalf("listed: %+v", l)
	}
	// Bad settings change nothing.
	for _, bad := range []ledger.KeySettings{
		{Limits: ledger.KeyLimits{BudgetDay: -1}},
		{Limits: ledger.KeyLimits{AllowedCIDRs: []string{"10.0.0.300/8"}}},
		{Limits: ledger.KeyLimits{AllowedCIDRs: []string{"10.0.0.1"}}},
		{Limits: ledger.KeyLimits{AllowedTools: []string{""}}},
		{Limits: ledger.KeyLimits{Note: strings.Repeat("n", 501)}},
		{Name: "\xff"},
		{Expires: t0.Add(-time.Second)},
	} {
		_, err := s.UpdateKey(bg, a.ID, k.ID, bad)
		WantErr(t, err, ledger.ErrInvalidArgument)
	}
	if l := MustKeyOf(t, s, a.ID, k.ID); l.Name != "renamed" || len(l.AllowedTools) != 2 {
		t.Fatalf("a refused update changed the key: %+v", l)
	}
	_, err = s.UpdateKey(bg, a.ID, "key_000000000000", ledger.KeySettings{})
	WantErr(t, err, ledger.ErrNotFound)
	// Expiry set by an update: an expired key is told apart from an unknown one.
	t0 = t0.Add(time.Hour)
	if _, _, err := s.LookupKey(bg, full); err != ledger.ErrKeyExpired {
		t.Fatalf("lookup of a key past its expiry: %v", err)
	}
	// Clearing the limits and the expiry (an update may keep a past expiry unchanged, or drop it).
	if got, err := s.UpdateKey(bg, a.ID, k.ID, ledger.KeySettings{}); err != nil || got.AllowedTools != nil || !got.Expires.IsZero() {
		t.Fatalf("clearing: %+v %v", got, err)
	}
	if _, _, err := s.LookupKey(bg, full); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeKey(bg, a.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	_, err = s.UpdateKey(bg, a.ID, k.ID, ledger.KeySettings{})
	WantErr(t, err, ledger.ErrAlreadyRevoked)
}
