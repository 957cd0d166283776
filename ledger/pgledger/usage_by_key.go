package pgledger

import (
	"context"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// UsageByKey counts an account's entries per key, tool and mode, by the entries' index of an
// account's times (00003_entries_by_time.sql).
func (s *Postgres) UsageByKey(ctx context.Context, q ledger.UsageQuery) ([]ledger.KeyUsageRow, error) {
	if err := ledger.CheckKeyUsageQuery(q); err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.mustExist(ctx, q.AccountID); err != nil {
		return nil, err
	}
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	if !q.From.IsZero() {
		from = q.From.UnixNano()
	}
	if !q.To.IsZero() {
		to = q.To.UnixNano()
	}
	rows, _ := s.pool.Query(qctx, `SELECT key_id, tool, mode,
			count(*) FILTER (WHERE kind = 'hold'), count(*) FILTER (WHERE kind = 'settle'), count(*) FILTER (WHERE kind = 'void'),
			coalesce(-sum(amount) FILTER (WHERE kind = 'settle'), 0)::bigint
		FROM entries
		WHERE kind IN ('hold', 'settle', 'void') AND account_id = $1 AND at >= $2 AND at < $3
		GROUP BY 1, 2, 3`, q.AccountID, from, to)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.KeyUsageRow, error) {
		var r ledger.KeyUsageRow
		err := row.Scan(&r.KeyID, &r.Tool, &r.Mode, &r.Requests, &r.Settled, &r.Voided, &r.Credits)
		return r, err
	})
	if err != nil {
		return nil, pgErr(ctx, "counting usage by key", err)
	}
	ledger.SortKeyUsage(out) // byte-wise, as Badger orders them, not by the database's collation
	return out, nil
}
