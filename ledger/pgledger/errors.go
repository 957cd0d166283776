package pgledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/caddy-textgen/textgen/ledger"
)

// How the PostgreSQL engine turns what pgx returns into the ledger's errors (ledger/errors.go): a
// database that cannot be reached, or does not answer within the query timeout, is
// ErrUnavailable, so that callers answer "try again later" instead of failing or hanging.

// SQLSTATE codes the engine tells apart.
const (
	pgUniqueViolation     = "23505"
	pgForeignKeyViolation = "23503"
)

// pgErr wraps err, an error of a call that did what. ctx is the call's context: when the caller
// gave up, its own error is returned.
func pgErr(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"),                           // insufficient resources
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", // shutting down, starting up
			pe.Code == "57014": // canceled by the query timeout
			return fmt.Errorf("%s: %w: %w", what, ledger.ErrUnavailable, err)
		case strings.HasPrefix(pe.Code, "22"): // data exception: a string PostgreSQL cannot store (NUL)
			return fmt.Errorf("%s: %w: %w", what, ledger.ErrInvalidArgument, err)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if ctx.Err() != nil { // the caller gave up (the query timeout is not on ctx)
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	var scan pgx.ScanArgError
	if errors.As(err, &scan) {
		return fmt.Errorf("%s: %w", what, err) // a bug of the engine, not the database's state
	}
	// Anything else is the connection: refused, reset, closed, or no answer in time.
	return fmt.Errorf("%s: %w: %w", what, ledger.ErrUnavailable, err)
}

// pgUniqueConstraint is the unique constraint that err violated, or "".
func pgUniqueConstraint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == pgUniqueViolation {
		return pe.ConstraintName
	}
	return ""
}

// pgForeignKey reports whether err is a foreign key violation: a row named an account that
// does not exist.
func pgForeignKey(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgForeignKeyViolation
}

// pgStorable refuses strings that PostgreSQL's text cannot hold (NUL characters), before they
// reach a batch of the group committer, where one bad call would roll back the others' work.
func pgStorable(field string, values ...string) error {
	for _, v := range values {
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%s contains a NUL character, which PostgreSQL cannot store: %w", field, ledger.ErrInvalidArgument)
		}
	}
	return nil
}
