package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// testMoneyBetween: the payments and reversals of every account created in a time range, oldest
// first, the range's end excluded, cut at the limit with Truncated; bad arguments refused.
func testMoneyBetween(t *testing.T, eng engine) {
	day := time.Date(2030, 3, 1, 10, 0, 0, 0, time.UTC)
	t0 := day
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a, b := MustAccount(t, s, "money-a@example.com"), MustAccount(t, s, "money-b@example.com")
	BuyPaid(t, s, a.ID, "cs_a1", "pi_a1", 100, 900)
	t0 = day.Add(time.Hour)
	BuyPaid(t, s, b.ID, "cs_b1", "pi_b1", 300, 2500)
	t0 = day.AddDate(0, 0, 1)
	MustReverse(t, s, Refund("re_a1", "pi_a1", 450))
	t0 = day.AddDate(0, 0, 2)
	BuyPaid(t, s, a.ID, "cs_a2", "pi_a2", 100, 900)
	MustReverse(t, s, ledger.ReversalRequest{ID: "du_b1", Kind: ledger.ReversalDispute, Payment: "pi_b1", AmountCents: 2500, Currency: "eur",
		Status: ledger.DisputeOpen, Reason: "fraudulent", Event: "evt_du_b1"})

	ids := func(p ledger.MoneyPeriod) (pays, revs []string) {
		for _, x := range p.Payments {
			pays = append(pays, x.ID)
		}
		for _, x := range p.Reversals {
			revs = append(revs, x.ID)
		}
		return
	}
	start := time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		from, to   time.Time
		limit      int
		pays, revs string
		truncated  bool
	}{
		{start, start.AddDate(0, 0, 2), 10, "pi_a1 pi_b1", "re_a1", false},
		{start, start.AddDate(0, 0, 3), 10, "pi_a1 pi_b1 pi_a2", "re_a1 du_b1", false},
		{start.AddDate(0, 0, 2), start.AddDate(0, 0, 3), 10, "pi_a2", "du_b1", false},
		{start, start.AddDate(0, 0, 3), 1, "pi_a1", "re_a1", true},
		{day.Add(time.Hour), day.AddDate(0, 0, 1), 10, "pi_b1", "", false}, // the start is in, the end out
		{start.AddDate(0, 0, 3), start.AddDate(0, 1, 0), 10, "", "", false},
	} {
		p, err := s.MoneyBetween(bg, c.from, c.to, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		pays, revs := ids(p)
		if join(pays) != c.pays || join(revs) != c.revs || p.Truncated != c.truncated || p.Payments == nil || p.Reversals == nil {
			t.Fatalf("MoneyBetween(%s, %s, %d): %v %v truncated %v; want %s / %s / %v", c.from, c.to, c.limit, pays, revs, p.Truncated,
				c.pays, c.revs, c.truncated)
		}
	}
	p, _ := s.MoneyBetween(bg, start, start.AddDate(0, 1, 0), 10)
	if r := p.Reversals[0]; r.AccountID != a.ID || r.Reference != "cs_a1" || r.AmountCents != 450 || r.Kind != ledger.ReversalRefund ||
		!r.Created.Equal(day.AddDate(0, 0, 1)) {
		t.Fatalf("the refund: %+v", r)
	}
	if py := p.Payments[1]; py.AccountID != b.ID || py.Credits != 300 || py.AmountCents != 2500 || py.Status != ledger.PaymentPaid ||
		!py.Created.Equal(day.Add(time.Hour)) {
		t.Fatalf("b's payment: %+v", py)
	}
	for _, c := range []struct {
		from, to time.Time
		limit    int
	}{{start, start, 10}, {start, start.Add(-time.Hour), 10}, {start, start.AddDate(0, 0, 1), 0}, {start, start.AddDate(0, 0, 1), ledger.MaxMoneyList + 1}} {
		if _, err := s.MoneyBetween(bg, c.from, c.to, c.limit); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("MoneyBetween(%s, %s, %d): %v, want ErrInvalidArgument", c.from, c.to, c.limit, err)
		}
	}
}

func join(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
