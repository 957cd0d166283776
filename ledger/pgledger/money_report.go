package pgledger

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// MoneyBetween on PostgreSQL: two queries in one read; payments and reversals have no index by
// creation time, so each is a scan of its table (docs/OPERATING.md, "What the console does not
// do").
func (s *Postgres) MoneyBetween(ctx context.Context, from, to time.Time, limit int) (ledger.MoneyPeriod, error) {
	if err := ledger.MoneyArgs(from, to, limit); err != nil {
		return ledger.MoneyPeriod{}, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.MoneyPeriod{}, err
	}
	defer done()
	f, t := from.UTC().UnixNano(), to.UTC().UnixNano()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgPayCols+` FROM payments WHERE created >= $1 AND created < $2
		ORDER BY created, id LIMIT $3`, f, t, limit+1)
	pays, err := pgx.CollectRows(rows, scanPay)
	if err != nil {
		return ledger.MoneyPeriod{}, pgErr(ctx, "listing payments", err)
	}
	rows, _ = s.pool.Query(qctx, `SELECT `+pgReversalCols+` FROM reversals WHERE created >= $1 AND created < $2
		ORDER BY created, id LIMIT $3`, f, t, limit+1)
	revs, err := pgx.CollectRows(rows, scanReversal)
	if err != nil {
		return ledger.MoneyPeriod{}, pgErr(ctx, "listing reversals", err)
	}
	out := ledger.MoneyPeriod{Payments: pays, Reversals: revs}
	if len(pays) > limit || len(revs) > limit {
		out.Truncated = true
		out.Payments, out.Reversals = pays[:min(len(pays), limit)], revs[:min(len(revs), limit)]
	}
	if out.Payments == nil {
		out.Payments = []ledger.Payment{}
	}
	if out.Reversals == nil {
		out.Reversals = []ledger.Reversal{}
	}
	return out, nil
}
