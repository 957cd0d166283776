package ledger

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"
)

// MoneyBetween on Badger: one pass over every payment and one over every reversal (they have
// no index by time; docs/OPERATING.md, "What the console does not do").
func (s *Badger) MoneyBetween(ctx context.Context, from, to time.Time, limit int) (MoneyPeriod, error) {
	if err := MoneyArgs(from, to, limit); err != nil {
		return MoneyPeriod{}, err
	}
	out := MoneyPeriod{Payments: []Payment{}, Reversals: []Reversal{}}
	err := scanJSON(ctx, s, prefixPaymentIntent, "payment", func(p Payment) bool {
		if InPeriod(p.Created, from, to) {
			out.Payments = append(out.Payments, p)
		}
		return false
	})
	if err == nil {
		err = scanJSON(ctx, s, prefixReversal, "reversal", func(r Reversal) bool {
			if InPeriod(r.Created, from, to) {
				out.Reversals = append(out.Reversals, r)
			}
			return false
		})
	}
	if err != nil {
		return MoneyPeriod{}, err
	}
	slices.SortFunc(out.Payments, func(a, b Payment) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	slices.SortFunc(out.Reversals, func(a, b Reversal) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	if len(out.Payments) > limit || len(out.Reversals) > limit {
		out.Truncated = true
		out.Payments, out.Reversals = out.Payments[:min(len(out.Payments), limit)], out.Reversals[:min(len(out.Reversals), limit)]
	}
	return out, nil
}
