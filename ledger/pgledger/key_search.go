package pgledger

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// FindKeys on PostgreSQL: one query, by the primary key for an id, else a scan of api_keys for
// the last 4 characters (no index on them; docs/OPERATING.md, "What the console does not do").
func (s *Postgres) FindKeys(ctx context.Context, hint string, limit int) ([]ledger.Key, error) {
	h, err := ledger.KeySearchArgs(hint, limit)
	if err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgKeyCols+pgKeyFrom+`
		WHERE ($1 <> '' AND k.id = $1) OR ($1 = '' AND k.last4 = $2 AND ($3 = '' OR k.prefix = $3))
		ORDER BY k.created DESC, k.id DESC LIMIT $4`, h.ID, h.Last4, h.Prefix, limit)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Key, error) {
		var r keyRow
		err := row.Scan(r.dest()...)
		return s.used.merge(r.key()), err
	})
	if err != nil {
		return nil, pgErr(ctx, "finding keys", err)
	}
	if out == nil {
		out = []ledger.Key{}
	}
	return out, nil
}
