package ledgertest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The Payments role: payments that credited nothing, recorded once per reference, listed newest
// first, resolved once. Run for every engine by the conformance suite.

// Unmatched is a payment with every field the caller sets.
func Unmatched(ref string) ledger.UnmatchedPayment {
	return ledger.UnmatchedPayment{Reference: ref, Event: "evt_" + ref, AccountID: "acct_nobodynobodynobo", Package: "starter",
		Credits: 100, AmountCents: 500, Currency: "eur", Problem: ledger.ProblemAmountMismatch, Detail: "the price is 900 eur"}
}

// MustPayments lists the payments or fails the test.
func MustPayments(t *testing.T, s ledger.Payments, openOnly bool, limit int) []ledger.UnmatchedPayment {
	t.Helper()
	ps, err := s.UnmatchedPayments(bg, openOnly, limit)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// Refs are the references of ps, in order.
func Refs(ps []ledger.UnmatchedPayment) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Reference
	}
	return out
}

// testUnmatchedPayments: every field the caller gives is kept, the store sets Created and
// ignores a resolution the caller gives; the list is newest first (by reference among payments
// of one time), at most limit long, and with openOnly leaves the resolved out.
func testUnmatchedPayments(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 4, 1, 9, 0, 0, 123456789, time.UTC)
	eng.setNow(t, &clock)
	if ps := MustPayments(t, s, false, 0); len(ps) != 0 {
		t.Fatalf("payments in a new store: %+v", ps)
	}
	p := Unmatched("cs_1")
	p.Created, p.Resolved, p.Resolution = clock.Add(-time.Hour), clock.Add(-time.Hour), "set by the caller"
	rec, repeated, err := s.RecordUnmatchedPayment(bg, p)
	if err != nil || repeated {
		t.Fatalf("record: %+v, repeated %v, %v", rec, repeated, err)
	}
	want := Unmatched("cs_1")
	want.Created = clock
	if rec != want {
		t.Fatalf("recorded %+v, want %+v", rec, want)
	}
	// Only the required fields; cs_3 and cs_2 at one time, later.
	clock = clock.Add(time.Second)
	var recs []ledger.UnmatchedPayment
	for _, ref := range []string{"cs_3", "cs_2"} {
		r, _, err := s.RecordUnmatchedPayment(bg, ledger.UnmatchedPayment{Reference: ref, Currency: "usd", Problem: ledger.ProblemUnknownPackage})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	clock = clock.Add(time.Second)
	r4, _, err := s.RecordUnmatchedPayment(bg, ledger.UnmatchedPayment{Reference: "cs_4", Currency: "usd", Problem: ledger.ProblemUnknownAccount})
	if err != nil {
		t.Fatal(err)
	}
	all := []ledger.UnmatchedPayment{r4, recs[1], recs[0], rec}
	if got := MustPayments(t, s, false, 0); !reflect.DeepEqual(got, all) {
		t.Fatalf("list:\n got %+v\nwant %+v", got, all)
	}
	if got := MustPayments(t, s, false, 2); !reflect.DeepEqual(got, all[:2]) {
		t.Fatalf("list of 2: %v, want %v", Refs(got), Refs(all[:2]))
	}
	if got := MustPayments(t, s, false, 5000); len(got) != 4 {
		t.Fatalf("list over the maximum: %v", Refs(got))
	}
	clock = clock.Add(time.Second)
	if _, _, err := s.ResolveUnmatchedPayment(bg, "cs_2", "refunded"); err != nil {
		t.Fatal(err)
	}
	if got := Refs(MustPayments(t, s, true, 0)); !reflect.DeepEqual(got, []string{"cs_4", "cs_3", "cs_1"}) {
		t.Fatalf("open payments %v", got)
	}
	if got := Refs(MustPayments(t, s, true, 1)); !reflect.DeepEqual(got, []string{"cs_4"}) {
		t.Fatalf("open payments, 1: %v", got)
	}
	if got := Refs(MustPayments(t, s, false, 0)); !reflect.DeepEqual(got, Refs(all)) {
		t.Fatalf("a resolution changed the order: %v", got)
	}
}

// testUnmatchedPaymentRepeated: a reference recorded again, even with other fields, changes
// nothing and returns the first record.
func testUnmatchedPaymentRepeated(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	first, repeated, err := s.RecordUnmatchedPayment(bg, Unmatched("cs_1"))
	if err != nil || repeated {
		t.Fatalf("first record: %v %v", repeated, err)
	}
	clock = clock.Add(time.Hour)
	other := ledger.UnmatchedPayment{Reference: "cs_1", Event: "evt_other", Currency: "usd", AmountCents: 1, Problem: ledger.ProblemUnknownPackage}
	got, repeated, err := s.RecordUnmatchedPayment(bg, other)
	if err != nil || !repeated || got != first {
		t.Fatalf("repeated record: %+v, repeated %v, %v; want %+v", got, repeated, err, first)
	}
	if ps := MustPayments(t, s, false, 0); len(ps) != 1 || ps[0] != first {
		t.Fatalf("stored %+v, want the first record only", ps)
	}
	// Resolved, it is still recorded once, and a new record does not reopen it.
	resolved, _, err := s.ResolveUnmatchedPayment(bg, "cs_1", "refunded")
	if err != nil {
		t.Fatal(err)
	}
	if got, repeated, err := s.RecordUnmatchedPayment(bg, other); err != nil || !repeated || got != resolved {
		t.Fatalf("record of a resolved payment: %+v, repeated %v, %v; want %+v", got, repeated, err, resolved)
	}
}

// RacePayments runs f(0), ..., f(n-1) at once, each in a goroutine of its own released
// together with the others, and returns what each returned and whether it was told new (not
// repeated).
func RacePayments(t *testing.T, n int, f func(i int) (ledger.UnmatchedPayment, bool, error)) ([]ledger.UnmatchedPayment, []bool) {
	t.Helper()
	recs := make([]ledger.UnmatchedPayment, n)
	news := make([]bool, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			rec, repeated, err := f(i)
			if err != nil {
				t.Error(err)
			}
			recs[i], news[i] = rec, !repeated
		})
	}
	close(start)
	wg.Wait()
	return recs, news
}

// CheckOneWinner fails the test unless exactly one of the racing callers was told new, the
// stored record is that caller's (what(i) is the field only caller i wrote), and every caller
// got the stored record.
func CheckOneWinner(t *testing.T, stored ledger.UnmatchedPayment, recs []ledger.UnmatchedPayment, news []bool, what func(ledger.UnmatchedPayment) string, mine func(i int) string) {
	t.Helper()
	winners := 0
	for i := range recs {
		if news[i] {
			winners++
			if what(stored) != mine(i) {
				t.Errorf("caller %d was told it won, but %q is stored", i, what(stored))
			}
		}
		if recs[i] != stored {
			t.Errorf("caller %d got %+v, stored is %+v", i, recs[i], stored)
		}
	}
	if winners != 1 {
		t.Fatalf("%d callers were told they won, want 1", winners)
	}
}

// Racing callers per payment, and payments raced on, in the concurrency tests.
const PaymentRacers, PaymentRaces = 16, 8

// testUnmatchedPaymentConcurrent: calls racing with one reference store one record; exactly one
// of them reports it new and all return it.
func testUnmatchedPaymentConcurrent(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	detail := func(i int) string { return fmt.Sprint("caller ", i) }
	for r := range PaymentRaces {
		ref := fmt.Sprint("cs_race_", r)
		recs, news := RacePayments(t, PaymentRacers, func(i int) (ledger.UnmatchedPayment, bool, error) {
			p := Unmatched(ref)
			p.Detail = detail(i)
			return s.RecordUnmatchedPayment(bg, p)
		})
		stored := MustPayments(t, s, false, 0)
		if len(stored) != r+1 {
			t.Fatalf("%d records after %d references: %v", len(stored), r+1, Refs(stored))
		}
		for _, p := range stored {
			if p.Reference == ref {
				CheckOneWinner(t, p, recs, news, func(p ledger.UnmatchedPayment) string { return p.Detail }, detail)
			}
		}
	}
}

// testResolveUnmatchedPayment: a resolution is kept once; a later one returns the first.
func testResolveUnmatchedPayment(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	if _, _, err := s.ResolveUnmatchedPayment(bg, "cs_unknown", "refunded"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("resolve of an unknown reference: %v", err)
	}
	rec, _, err := s.RecordUnmatchedPayment(bg, Unmatched("cs_1"))
	if err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Minute)
	got, repeated, err := s.ResolveUnmatchedPayment(bg, "cs_1", "credited acct_nobodynobodynobo by hand")
	want := rec
	want.Resolved, want.Resolution = clock, "credited acct_nobodynobodynobo by hand"
	if err != nil || repeated || got != want {
		t.Fatalf("resolve: %+v, repeated %v, %v; want %+v", got, repeated, err, want)
	}
	clock = clock.Add(time.Minute)
	if got, repeated, err := s.ResolveUnmatchedPayment(bg, "cs_1", "refunded"); err != nil || !repeated || got != want {
		t.Fatalf("second resolve: %+v, repeated %v, %v; want %+v", got, repeated, err, want)
	}
	if ps := MustPayments(t, s, false, 0); len(ps) != 1 || ps[0] != want {
		t.Fatalf("stored %+v, want %+v", ps, want)
	}
	if ps := MustPayments(t, s, true, 0); len(ps) != 0 {
		t.Fatalf("a resolved payment is listed open: %+v", ps)
	}
}

// testResolveUnmatchedPaymentConcurrent: of resolutions racing on one payment, exactly one is
// kept, and every caller gets it.
func testResolveUnmatchedPaymentConcurrent(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	note := func(i int) string { return fmt.Sprint("note ", i) }
	for r := range PaymentRaces {
		ref := fmt.Sprint("cs_race_", r)
		if _, _, err := s.RecordUnmatchedPayment(bg, Unmatched(ref)); err != nil {
			t.Fatal(err)
		}
		recs, news := RacePayments(t, PaymentRacers, func(i int) (ledger.UnmatchedPayment, bool, error) {
			return s.ResolveUnmatchedPayment(bg, ref, note(i))
		})
		stored := MustPayments(t, s, false, 0)
		if len(stored) != r+1 {
			t.Fatalf("%d records after %d references: %v", len(stored), r+1, Refs(stored))
		}
		for _, p := range stored {
			if p.Reference == ref {
				if p.Resolved.IsZero() {
					t.Fatalf("%s is not resolved: %+v", ref, p)
				}
				CheckOneWinner(t, p, recs, news, func(p ledger.UnmatchedPayment) string { return p.Resolution }, note)
			}
		}
	}
}

// testUnmatchedPaymentsInvalid: arguments the API refuses are ErrInvalidArgument and change
// nothing.
func testUnmatchedPaymentsInvalid(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	long := strings.Repeat("x", 513)
	for name, change := range map[string]func(*ledger.UnmatchedPayment){
		"empty reference":     func(p *ledger.UnmatchedPayment) { p.Reference = "" },
		"long reference":      func(p *ledger.UnmatchedPayment) { p.Reference = long[:257] },
		"reference not UTF-8": func(p *ledger.UnmatchedPayment) { p.Reference = "cs_\xff" },
		"empty problem":       func(p *ledger.UnmatchedPayment) { p.Problem = "" },
		"long problem":        func(p *ledger.UnmatchedPayment) { p.Problem = long[:65] },
		"empty currency":      func(p *ledger.UnmatchedPayment) { p.Currency = "" },
		"long currency":       func(p *ledger.UnmatchedPayment) { p.Currency = long[:9] },
		"long event":          func(p *ledger.UnmatchedPayment) { p.Event = long[:257] },
		"long account id":     func(p *ledger.UnmatchedPayment) { p.AccountID = long[:257] },
		"long package":        func(p *ledger.UnmatchedPayment) { p.Package = long[:257] },
		"long detail":         func(p *ledger.UnmatchedPayment) { p.Detail = long },
		"detail not UTF-8":    func(p *ledger.UnmatchedPayment) { p.Detail = "\xc3" },
		"negative amount":     func(p *ledger.UnmatchedPayment) { p.AmountCents = -1 },
		"negative credits":    func(p *ledger.UnmatchedPayment) { p.Credits = -1 },
		"zero payment":        func(p *ledger.UnmatchedPayment) { *p = ledger.UnmatchedPayment{} },
	} {
		p := Unmatched("cs_bad")
		change(&p)
		if _, _, err := s.RecordUnmatchedPayment(bg, p); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if ps := MustPayments(t, s, false, 0); len(ps) != 0 {
		t.Fatalf("refused records were stored: %+v", ps)
	}
	rec, _, err := s.RecordUnmatchedPayment(bg, Unmatched("cs_1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, ref, note string }{
		{"empty reference", "", "refunded"},
		{"long reference", long[:257], "refunded"},
		{"empty note", "cs_1", ""},
		{"long note", "cs_1", long},
		{"note not UTF-8", "cs_1", "refunded \xff"},
	} {
		if _, _, err := s.ResolveUnmatchedPayment(bg, c.ref, c.note); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Errorf("resolve with %s: %v, want ErrInvalidArgument", c.name, err)
		}
	}
	if _, err := s.UnmatchedPayments(bg, false, -1); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Errorf("negative limit: %v", err)
	}
	if ps := MustPayments(t, s, false, 0); len(ps) != 1 || ps[0] != rec {
		t.Fatalf("refused resolutions changed the payment: %+v, want %+v", ps, rec)
	}
}
