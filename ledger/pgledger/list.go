package pgledger

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// readList runs one read query and collects its rows with scan: never nil (an empty list is
// []T{}, as Badger's lists are), and a failure is named by what (pgErr: "listing top-ups").
func readList[T any](s *Postgres, ctx context.Context, what string, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, sql, args...)
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, pgErr(ctx, what, err)
	}
	if out == nil {
		out = []T{}
	}
	return out, nil
}
