package pgledger

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Reports of the PostgreSQL engine: History pages through an account's entries by the primary
// key (account_id, seq); Usage aggregates in the database. Both show committed entries only.

// History returns the account's entries newest first.
func (s *Postgres) History(ctx context.Context, accountID string, p ledger.Page) ([]ledger.Entry, string, error) {
	limit, before, err := ledger.HistoryPage(p) // list entries with seq < before
	if err != nil {
		return nil, "", err
	}
	if before == 0 {
		before = math.MaxInt64
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, "", err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgList("", pgEntryCols, false)+` FROM entries
		WHERE account_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3`, accountID, int64(before), limit+1)
	out, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, "", pgErr(ctx, "reading history", err)
	}
	if len(out) == 0 {
		return []ledger.Entry{}, "", s.mustExist(ctx, accountID)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = ledger.HistoryCursor(out[len(out)-1].Seq)
	}
	return out, next, nil
}

// Usage counts holds, settles and voids per UTC day, tool and mode, for one account or all, with
// entry times in [From, To).
func (s *Postgres) Usage(ctx context.Context, q ledger.UsageQuery) ([]ledger.UsageRow, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if q.AccountID != "" {
		if err := s.mustExist(ctx, q.AccountID); err != nil {
			return nil, err
		}
	}
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	if !q.From.IsZero() {
		from = q.From.UnixNano()
	}
	if !q.To.IsZero() {
		to = q.To.UnixNano()
	}
	const day = int64(24 * time.Hour)
	rows, _ := s.pool.Query(qctx, `SELECT floor(at::numeric / $4)::bigint AS day, tool, mode, CASE WHEN $5 THEN key_id ELSE '' END,
			count(*) FILTER (WHERE kind = 'hold'), count(*) FILTER (WHERE kind = 'settle'), count(*) FILTER (WHERE kind = 'void'),
			coalesce(-sum(amount) FILTER (WHERE kind = 'settle'), 0)::bigint
		FROM entries
		WHERE kind IN ('hold', 'settle', 'void') AND ($1 = '' OR account_id = $1) AND at >= $2 AND at < $3
		GROUP BY 1, 2, 3, 4`, q.AccountID, from, to, day, q.ByKey)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.UsageRow, error) {
		var r ledger.UsageRow
		var d int64
		err := row.Scan(&d, &r.Tool, &r.Mode, &r.KeyID, &r.Requests, &r.Settled, &r.Voided, &r.Credits)
		r.Day = time.Unix(d*int64(24*time.Hour/time.Second), 0).UTC().Format("2006-01-02")
		return r, err
	})
	if err != nil {
		return nil, pgErr(ctx, "counting usage", err)
	}
	// Ordered here, byte-wise as Badger orders them, not by the database's collation.
	slices.SortFunc(out, func(a, b ledger.UsageRow) int {
		return cmp.Or(cmp.Compare(a.Day, b.Day), cmp.Compare(a.Tool, b.Tool), cmp.Compare(a.Mode, b.Mode), cmp.Compare(a.KeyID, b.KeyID))
	})
	return out, nil
}
