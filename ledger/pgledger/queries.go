package pgledger

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
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

// execClaimed runs one write of a claimed outbox row (an e-mail, an alert delivery) whose id is
// args[0]: ErrNotFound when it changed no row (the claim ran out and another caller holds it,
// or the row was resolved before), a failure named by what.
func (s *Postgres) execClaimed(ctx context.Context, what, thing, sql string, args ...any) error {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	tag, err := s.pool.Exec(wctx, sql, args...)
	if err != nil {
		return pgErr(ctx, what, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s %q under this claim: %w", thing, ledger.TruncateUTF8(fmt.Sprint(args[0]), 64), ledger.ErrNotFound)
	}
	return nil
}
