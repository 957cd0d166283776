package console

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Money in and out across accounts, from the payments and reversals the ledger keeps
// (ledger.MoneyBetween): the Overview's revenue and credits sold per day, and the accountant's
// export of a month (export.go).
//
// A purchase is a payment that was paid (one that credited nothing, an unmatched payment,
// included: the money arrived), on the day its Checkout Session completed; a refund one that
// was applied (not one that failed), a dispute one that is open or lost (not won), on the day
// each was first applied. Revenue is purchases minus refunds, in EUR only.

// moneyListLimit is the most payments (and reversals) one page or export reads.
const moneyListLimit = 50_000

// revenueDays is how many days of revenue the Overview shows.
const revenueDays = 30

// moneyRow is one purchase, refund or dispute, with the signs of money: a purchase's credits
// and amount are positive, a refund's and a dispute's negative.
type moneyRow struct {
	Time        time.Time
	AccountID   string
	Reference   string
	Kind        string // purchase, refund or dispute
	Credits     int64
	AmountCents int64
	Currency    string
}

// moneyRows are the rows of what MoneyBetween found, oldest first.
func moneyRows(p ledger.MoneyPeriod) []moneyRow {
	var out []moneyRow
	for _, py := range p.Payments {
		if py.Status != ledger.PaymentPaid {
			continue
		}
		out = append(out, moneyRow{Time: py.Created, AccountID: py.AccountID, Reference: py.Reference, Kind: "purchase",
			Credits: py.Credits, AmountCents: py.AmountCents, Currency: strings.ToUpper(py.Currency)})
	}
	for _, r := range p.Reversals {
		switch {
		case r.Kind == ledger.ReversalRefund && r.Status == ledger.RefundApplied,
			r.Kind == ledger.ReversalDispute && (r.Status == ledger.DisputeOpen || r.Status == ledger.DisputeLost):
		default:
			continue
		}
		out = append(out, moneyRow{Time: r.Created, AccountID: r.AccountID, Reference: r.Reference, Kind: string(r.Kind),
			Credits: -r.Credits, AmountCents: -r.AmountCents, Currency: strings.ToUpper(r.Currency)})
	}
	sortRows(out)
	return out
}

func sortRows(rows []moneyRow) {
	slices.SortStableFunc(rows, func(x, y moneyRow) int { return x.Time.Compare(y.Time) })
}

// revenueDay is one day of the Overview's revenue.
type revenueDay struct {
	Day                         string
	PurchasedCents, RefundCents int64 // RefundCents is negative
	NetCents                    int64
	CreditsSold                 int64
	Bar                         int // percent of the best day's net, for the bar
}

type revenueData struct {
	Days                  []revenueDay
	NetCents, CreditsSold int64
	ThisMonth, LastMonth  string
	Truncated             bool
}

// revenue reads the last revenueDays UTC days up to today (the console's clock), newest first.
func (a *app) revenue(ctx context.Context) (revenueData, error) {
	t := now().UTC()
	today := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	from := today.AddDate(0, 0, -(revenueDays - 1))
	p, err := a.store.MoneyBetween(ctx, from, today.AddDate(0, 0, 1), moneyListLimit)
	if err != nil {
		return revenueData{}, err
	}
	d := revenueData{Truncated: p.Truncated, ThisMonth: today.Format("2006-01"),
		LastMonth: time.Date(today.Year(), today.Month()-1, 1, 0, 0, 0, 0, time.UTC).Format("2006-01")}
	byDay := map[string]*revenueDay{}
	for i := range revenueDays {
		day := from.AddDate(0, 0, i).Format("2006-01-02")
		byDay[day] = &revenueDay{Day: day}
	}
	for _, r := range moneyRows(p) {
		rd := byDay[r.Time.UTC().Format("2006-01-02")]
		if rd == nil || r.Currency != "EUR" {
			continue
		}
		switch r.Kind {
		case "purchase":
			rd.PurchasedCents += r.AmountCents
			rd.CreditsSold += r.Credits
		case "refund":
			rd.RefundCents += r.AmountCents
		}
	}
	var best int64 = 1
	for _, rd := range byDay {
		rd.NetCents = rd.PurchasedCents + rd.RefundCents
		best = max(best, rd.NetCents)
		d.NetCents += rd.NetCents
		d.CreditsSold += rd.CreditsSold
	}
	for i := revenueDays - 1; i >= 0; i-- {
		rd := byDay[from.AddDate(0, 0, i).Format("2006-01-02")]
		rd.Bar = int(max(rd.NetCents, 0) * 100 / best)
		d.Days = append(d.Days, *rd)
	}
	return d, nil
}
