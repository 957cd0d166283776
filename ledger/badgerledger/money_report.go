package badgerledger

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// MoneyBetween on Badger: one pass over every payment and one over every reversal (they have
// no index by time; docs/OPERATING.md, "What the console does not do").
func (s *Badger) MoneyBetween(ctx context.Context, from, to time.Time, limit int) (ledger.MoneyPeriod, error) {
	if err := ledger.MoneyArgs(from, to, limit); err != nil {
		return ledger.MoneyPeriod{}, err
	}
	out := ledger.MoneyPeriod{Payments: []ledger.Payment{}, Reversals: []ledger.Reversal{}}
	err := scanJSON(ctx, s, prefixPaymentIntent, "payment", func(p ledger.Payment) bool {
		if ledger.InPeriod(p.Created, from, to) {
			out.Payments = append(out.Payments, p)
		}
		return false
	})
	if err == nil {
		err = scanJSON(ctx, s, prefixReversal, "reversal", func(r ledger.Reversal) bool {
			if ledger.InPeriod(r.Created, from, to) {
				out.Reversals = append(out.Reversals, r)
			}
			return false
		})
	}
	if err != nil {
		return ledger.MoneyPeriod{}, err
	}
	slices.SortFunc(out.Payments, func(a, b ledger.Payment) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	slices.SortFunc(out.Reversals, func(a, b ledger.Reversal) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	if len(out.Payments) > limit || len(out.Reversals) > limit {
		out.Truncated = true
		out.Payments, out.Reversals = out.Payments[:min(len(out.Payments), limit)], out.Reversals[:min(len(out.Reversals), limit)]
	}
	return out, nil
}
