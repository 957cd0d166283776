package ledgertest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Redemption codes (ledger/codes.go).

// MustCode creates a code, failing the test on an error.
func MustCode(t testing.TB, s ledger.Store, n ledger.NewCode) (string, ledger.RedemptionCode) {
	t.Helper()
	code, c, err := s.CreateCode(bg, n)
	if err != nil {
		t.Fatal(err)
	}
	return code, c
}

func testCodes(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "code-a@example.com").ID
	b := MustAccount(t, s, "code-b@example.com").ID
	past := time.Now().Add(-time.Hour)
	for _, n := range []ledger.NewCode{
		{Credits: 0}, {Credits: -1}, {Credits: ledger.MaxCodeCredits + 1}, {Credits: 1, MaxUses: -1},
		{Credits: 1, MaxUses: ledger.MaxCodeUses + 1}, {Credits: 1, Expires: past},
		{Credits: 1, Note: strings.Repeat("x", 201)}, {Credits: 1, Note: "\xff"},
	} {
		if _, _, err := s.CreateCode(bg, n); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Errorf("CreateCode(%+v): %v, want ErrInvalidArgument", n, err)
		}
	}

	code, c := MustCode(t, s, ledger.NewCode{Credits: 25, Note: "launch"})
	norm, ok := ledger.NormalizeCode(code)
	if !ok || c.MaxUses != 1 || c.Uses != 0 || c.Credits != 25 || c.Note != "launch" || c.Last4 != norm[len(norm)-4:] ||
		!c.Disabled.IsZero() || !c.Expires.IsZero() || c.State(time.Now()) != "active" {
		t.Fatalf("created %q %+v", code, c)
	}
	assertNotStored(t, eng, s, norm, strings.ReplaceAll(code, "-", ""), code)

	// Redeemed as the customer types it: lower case, spaces instead of hyphens.
	typed := " " + strings.ToLower(strings.ReplaceAll(code, "-", " ")) + " "
	r, err := s.Redeem(bg, a, typed)
	if err != nil {
		t.Fatal(err)
	}
	if r.Entry.Kind != ledger.KindGrant || r.Entry.Mode != ledger.Live || r.Entry.Amount != 25 ||
		r.Entry.Reference != ledger.CodeReference(c.ID) || r.Entry.Reason != ledger.RedeemReason ||
		r.Balance.Balance != 25 || r.Balance.Available != 25 || r.Code.Uses != 1 || r.Code.ID != c.ID {
		t.Fatalf("redeem: %+v", r)
	}
	if id, ok := ledger.CodeOfReference(r.Entry.Reference); !ok || id != c.ID {
		t.Fatalf("CodeOfReference(%q) = %q %v", r.Entry.Reference, id, ok)
	}
	if h := AllHistory(t, s, a); len(h) != 1 || h[0] != r.Entry {
		t.Fatalf("history %+v, want %+v", h, r.Entry)
	}
	// Once per account; and this one-use code is now used up for everyone else.
	_, err = s.Redeem(bg, a, code)
	WantErr(t, err, ledger.ErrAlreadyRedeemed)
	_, err = s.Redeem(bg, b, code)
	WantErr(t, err, ledger.ErrCodeUsedUp)
	WantErr(t, err, ledger.ErrCodeNotRedeemable)
	if bal := MustBalance(t, s, b); bal.Balance != 0 {
		t.Fatalf("b credited: %+v", bal)
	}

	// Unknown and malformed codes look alike to the caller: not redeemable. The mistyped one
	// changes the code's last character (to 2, or 3 where it is 2 already).
	typo := code[:len(code)-1] + "2"
	if code[len(code)-1] == '2' {
		typo = code[:len(code)-1] + "3"
	}
	for _, bad := range []string{"", "TG", "hello", strings.Repeat("A", 500), typo, ledger.MakeCode()} {
		_, err := s.Redeem(bg, a, bad)
		WantErr(t, err, ledger.ErrCodeUnknown)
		WantErr(t, err, ledger.ErrCodeNotRedeemable)
	}

	// Unknown or disabled accounts.
	code2, c2 := MustCode(t, s, ledger.NewCode{Credits: 3, MaxUses: 5})
	_, err = s.Redeem(bg, "acct_0000000000000000", code2)
	WantErr(t, err, ledger.ErrNotFound)
	if _, err := s.SetAccountStatus(bg, b, ledger.StatusDisabled); err != nil {
		t.Fatal(err)
	}
	_, err = s.Redeem(bg, b, code2)
	WantErr(t, err, ledger.ErrAccountDisabled)
	if _, err := s.SetAccountStatus(bg, b, ledger.StatusActive); err != nil {
		t.Fatal(err)
	}

	// Disabled: refused, redemptions made stay; disabling twice keeps the first time.
	if _, err := s.Redeem(bg, b, code2); err != nil {
		t.Fatal(err)
	}
	d1, err := s.DisableCode(bg, c2.ID)
	if err != nil || d1.Disabled.IsZero() || d1.State(time.Now()) != "disabled" || d1.Uses != 1 {
		t.Fatalf("disable: %+v %v", d1, err)
	}
	d2, err := s.DisableCode(bg, c2.ID)
	if err != nil || !d2.Disabled.Equal(d1.Disabled) {
		t.Fatalf("disable again: %+v %v", d2, err)
	}
	_, err = s.Redeem(bg, a, code2)
	WantErr(t, err, ledger.ErrCodeDisabled)
	WantErr(t, err, ledger.ErrCodeNotRedeemable)
	if _, err := s.DisableCode(bg, "code_000000000000"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("disable unknown: %v", err)
	}
	if _, err := s.DisableCode(bg, "nonsense"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("disable malformed: %v", err)
	}

	// Who redeemed, and the list with its counts.
	reds, err := s.CodeRedemptions(bg, c.ID, 0)
	if err != nil || len(reds) != 1 || reds[0].AccountID != a || reds[0].Email != "code-a@example.com" ||
		reds[0].Credits != 25 || reds[0].Seq != r.Entry.Seq || reds[0].CodeID != c.ID {
		t.Fatalf("redemptions: %+v %v", reds, err)
	}
	if _, err := s.CodeRedemptions(bg, "code_000000000000", 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("redemptions of unknown: %v", err)
	}
	list, err := s.ListCodes(bg, 0)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	byID := map[string]ledger.RedemptionCode{}
	for _, x := range list {
		byID[x.ID] = x
	}
	if byID[c.ID].Uses != 1 || byID[c2.ID].Uses != 1 || byID[c2.ID].Disabled.IsZero() {
		t.Fatalf("list: %+v", list)
	}
	if got, err := s.GetCode(bg, c.ID); err != nil || got.Uses != 1 {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := s.ListCodes(bg, -1); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("negative limit: %v", err)
	}
	VerifyClean(t, s)
}

func testCodeExpiry(t *testing.T, eng engine) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &now)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "exp-a@example.com").ID
	b := MustAccount(t, s, "exp-b@example.com").ID
	code, c := MustCode(t, s, ledger.NewCode{Credits: 5, MaxUses: 2, Expires: now.Add(time.Hour)})
	if !c.Expires.Equal(now.Add(time.Hour)) {
		t.Fatalf("expires %v", c.Expires)
	}
	if _, err := s.Redeem(bg, a, code); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour) // the expiry itself is too late
	_, err := s.Redeem(bg, b, code)
	WantErr(t, err, ledger.ErrCodeExpired)
	WantErr(t, err, ledger.ErrCodeNotRedeemable)
	got, err := s.GetCode(bg, c.ID)
	if err != nil || got.State(now) != "expired" || got.Uses != 1 {
		t.Fatalf("expired code: %+v %v", got, err)
	}
	if bal := MustBalance(t, s, b); bal.Balance != 0 {
		t.Fatalf("b credited after expiry: %+v", bal)
	}
	VerifyClean(t, s)
}

// testRedeemOnceConcurrent: one account redeeming one code 30 times at once is credited once.
func testRedeemOnceConcurrent(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "once@example.com").ID
	code, c := MustCode(t, s, ledger.NewCode{Credits: 7, MaxUses: 100})
	ok, already, other := redeemAll(t, s, code, repeat(a, 30))
	if ok != 1 || already != 29 || len(other) != 0 {
		t.Fatalf("30 redemptions by one account: %d credited, %d already redeemed, others %v", ok, already, other)
	}
	if bal := MustBalance(t, s, a); bal.Balance != 7 {
		t.Fatalf("balance %+v, want 7", bal)
	}
	if got, err := s.GetCode(bg, c.ID); err != nil || got.Uses != 1 {
		t.Fatalf("code %+v %v", got, err)
	}
	VerifyClean(t, s)
}

// testRedeemUsesConcurrent: 50 accounts redeeming a 10-use code at once: exactly 10 are
// credited.
func testRedeemUsesConcurrent(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	var accts []string
	for i := range 50 {
		accts = append(accts, MustAccount(t, s, fmt.Sprintf("many%d@example.com", i)).ID)
	}
	code, c := MustCode(t, s, ledger.NewCode{Credits: 3, MaxUses: 10})
	CheckRedeemedExactly(t, []ledger.Store{s}, code, c.ID, accts, 3, 10)
}

// CheckRedeemedExactly has every account of accts redeem code at once, spread over stores
// (instances of one ledger), and checks that exactly uses of them were credited credits each,
// the others refused as used up, and that the code's count, its redemptions and Verify agree.
func CheckRedeemedExactly(t *testing.T, stores []ledger.Store, code, codeID string, accts []string, credits, uses int64) {
	t.Helper()
	var mu sync.Mutex
	okN, usedUp := 0, 0
	var other []error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, a := range accts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := stores[i%len(stores)].Redeem(bg, a, code)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				okN++
			case errors.Is(err, ledger.ErrCodeUsedUp):
				usedUp++
			default:
				other = append(other, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if int64(okN) != uses || usedUp != len(accts)-int(uses) || len(other) != 0 {
		t.Fatalf("%d redemptions of a %d-use code: %d credited, %d used up, others %v", len(accts), uses, okN, usedUp, other)
	}
	s := stores[0]
	var credited int64
	for _, a := range accts {
		b := MustBalance(t, s, a)
		if b.Balance != 0 && b.Balance != credits {
			t.Fatalf("account %s has %d credits, want 0 or %d", a, b.Balance, credits)
		}
		credited += b.Balance
	}
	if credited != uses*credits {
		t.Fatalf("credited %d in all, want %d", credited, uses*credits)
	}
	got, err := s.GetCode(bg, codeID)
	if err != nil || got.Uses != uses {
		t.Fatalf("code %+v %v, want %d uses", got, err, uses)
	}
	reds, err := s.CodeRedemptions(bg, codeID, 1000)
	if err != nil || int64(len(reds)) != uses {
		t.Fatalf("%d redemptions listed (%v), want %d", len(reds), err, uses)
	}
	VerifyClean(t, s)
}

// redeemAll redeems code for each account of accts at once and counts the outcomes.
func redeemAll(t *testing.T, s ledger.Store, code string, accts []string) (ok, already int, other []error) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, a := range accts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.Redeem(bg, a, code)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ledger.ErrAlreadyRedeemed):
				already++
			default:
				other = append(other, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return ok, already, other
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// IsAlreadyRedeemed reports whether err is ledger.ErrAlreadyRedeemed.
func IsAlreadyRedeemed(err error) bool { return errors.Is(err, ledger.ErrAlreadyRedeemed) }
