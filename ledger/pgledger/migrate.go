package pgledger

import (
	"context"
	"embed"
	"fmt"
	"hash/crc32"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"go.uber.org/zap"
)

// The PostgreSQL schema is a series of versioned SQL files embedded in the binary and applied by
// goose when a store opens. Instances that start together take turns on a session-level advisory
// lock, so one applies what is missing and the others find it done.

//go:embed migrations/*.sql
var pgMigrations embed.FS

const (
	// pgVersionTable records the applied migrations (goose's table, under a name of the
	// ledger's own so that it can share a database with other goose users).
	pgVersionTable = "ledger_schema_version"
	// pgLockWait is how long an open waits for another instance's migration: polled once a
	// second, up to this many times.
	pgLockWait = 120
)

// pgMigrationLockID is the advisory lock of the ledger's migrations, its own so that it does
// not wait for other goose users of the same database.
var pgMigrationLockID = int64(crc32.ChecksumIEEE([]byte("caddy-textgen ledger migrations")))

// migratePostgres brings the schema up to date.
func migratePostgres(ctx context.Context, pool *pgxpool.Pool, log *zap.Logger) error {
	fsys, err := fs.Sub(pgMigrations, "migrations")
	if err != nil {
		return err
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(pgMigrationLockID), lock.WithLockTimeout(1, pgLockWait))
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker),
		goose.WithTableName(pgVersionTable),
		goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrating the ledger schema: %w", err)
	}
	for _, r := range results {
		log.Info("applied ledger schema migration", zap.String("file", r.Source.Path), zap.Duration("took", r.Duration))
	}
	return nil
}
