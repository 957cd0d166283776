package pgledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// Postgres is the Store kept in a PostgreSQL database, shared by every Caddy instance that opens
// the same database. Create it with OpenPostgres.
//
// # State
//
// It keeps no authoritative state in memory: every call reads or changes the database, so what
// one instance did is what the next call on any instance sees. The only exception is API keys'
// last-use times, noted in memory and written every LastUsedFlushInterval (keys.go).
// The schema (migrations/00001_ledger.sql) has one table per record: accounts (with
// their figures: balances, open holds, next entry number), entries (primary key account and
// number), holds (primary key account and request id), api_keys (SHA-256 digests only),
// credentials, sessions (token digests only) and idempotency; 00002_generations.sql adds the
// kept generations (ciphertext only, generations.go), 00005_payments.sql the payments
// that credited nothing (payments.go), 00006_low_balance_alerts.sql the index of the
// accounts with a low-balance alert (tokens.go). Money and counts are bigint, times unix
// nanoseconds.
//
// # Exactly once across instances
//
// Every change of credits is a server-side function (ledger_holds or ledger_hold, ledger_grant,
// ledger_refill) that first locks the account's row (SELECT ... FOR NO KEY UPDATE): changes of
// one account are serialised across all instances, and each statement after the lock sees what
// the transactions before it committed. A hold takes a credit only if the locked row shows one
// available; a request id already held, or a grant reference already used, is found and reported
// (Repeated) instead of applied twice, and the primary key of holds and the unique index on
// (account, reference) make a second one impossible anyway. A hold is resolved by an update
// conditional on state = 'open', so a second resolver (another instance, the sweep) changes
// nothing and reports the first outcome.
//
// # Group commit
//
// These functions run through one committer per store (commit.go): what is queued
// while a transaction is in flight goes out as the next one, one pipelined round trip and one
// commit for all, sorted by account so that instances never deadlock, with the hold operations
// merged into one ledger_holds call (ledger_hold for a lone one). Each caller gets its own
// outcome. A call returns once its change is committed: Reserve is Hold here (a hold that is not
// committed does not exist for the other instances and is lost with this one). Run the database
// with synchronous_commit on (the default): a commit the ledger acknowledged must survive the
// database's crash.
//
// # Holds left open
//
// OpenPostgres does not void the open holds it finds, as Badger does at Open: other instances
// are alive and may settle them. A hold whose instance died is voided with reason "expired" by
// the first sweep of any instance after its TTL, and an Idempotency-Key left in progress is free
// after its hold TTL. Expiry compares times from the instances' clocks (the holds' expiry is
// written by the instance that took it), so keep the instances' clocks synchronised.
//
// # Faults
//
// Every call runs under a deadline (QueryTimeout; Health under HealthTimeout) and a database
// that cannot be reached, or does not answer in time, gives ErrUnavailable, never a hang; the
// pool reconnects by itself when the database is back. Calls that change credits or protect an
// account ignore the caller's cancellation but keep the deadline. A call that failed with
// ErrUnavailable may have been committed just before the connection failed: a hold then expires
// by its TTL, and repeating a hold, settle, void or referenced grant reports what happened.
type Postgres struct {
	pool *pgxpool.Pool
	opts PostgresOptions
	log  *zap.Logger
	c    *pgCommitter
	used lastUses // keys' last-use times not yet written (keys.go)

	// Every call is admitted by life.Begin and released by life.End, so Close waits for
	// the calls in flight.
	life ledger.Lifecycle
}

// OpenPostgres connects to the database at url (a PostgreSQL URL or key=value string, as
// pgxpool.ParseConfig reads it), brings its schema up to date (migrate.go) and starts
// the background hold-expiry sweep and last-use flush.
//
// Several instances may open the same database at once: they are meant to. Unlike Open (Badger),
// OpenPostgres does not void the open holds it finds, because the instances that took them may
// be alive and about to settle them; a hold whose instance died is voided by the first sweep of
// any instance after its TTL.
//
// Expected errors: ErrInvalidArgument (a bad url or option), ErrUnavailable (the database does
// not answer).
func OpenPostgres(ctx context.Context, url string, opts PostgresOptions) (*Postgres, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("opening ledger: database url: %w: %w", ledger.ErrInvalidArgument, err)
	}
	// The server gives up on a statement when the client does (a lock wait that outlives the
	// query timeout), so that a change reported ErrUnavailable is rarely committed afterwards.
	if _, ok := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !ok {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(opts.QueryTimeout.Milliseconds(), 10)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening ledger: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, opts.QueryTimeout)
	err = pool.Ping(pctx)
	cancel()
	if err != nil {
		pool.Close()
		return nil, pgErr(ctx, "opening ledger: connecting to the database", err)
	}
	// The migrations may wait for another instance's: their lock has a bound of its own.
	mctx, cancel := context.WithTimeout(ctx, pgLockWait*time.Second+time.Minute)
	err = migratePostgres(mctx, pool, opts.Logger)
	cancel()
	if err != nil {
		pool.Close()
		return nil, pgErr(ctx, "opening ledger", err)
	}
	s := &Postgres{
		pool: pool,
		opts: opts,
		log:  opts.Logger,
		c:    newPgCommitter(pool, opts.QueryTimeout, opts.Logger, opts.Now),
	}
	s.life.StartLifecycle()
	// Kept generations whose window ended while no instance ran go at once.
	dctx, cancel := context.WithTimeout(ctx, opts.QueryTimeout)
	if _, err := s.deleteExpiredGenerations(dctx, s.now()); err != nil {
		s.log.Warn("deleting expired generations at start", zap.Error(err))
	}
	cancel()
	s.life.Run(s.background)
	return s, nil
}

// background runs the hold-expiry sweep and the last-use flush, each on its own interval (a
// negative one disables it), until Close.
func (s *Postgres) background(stop <-chan struct{}) {
	sweep, stopSweep := tick(s.opts.SweepInterval)
	defer stopSweep()
	flush, stopFlush := tick(s.opts.LastUsedFlushInterval)
	defer stopFlush()
	for {
		select {
		case <-stop:
			return
		case <-sweep:
			if n, err := s.sweep(context.Background()); err != nil && !errors.Is(err, ledger.ErrClosed) {
				s.log.Error("hold expiry sweep failed", zap.Error(err))
			} else if n > 0 {
				s.log.Info("voided expired holds", zap.Int("holds", n))
			}
		case <-flush:
			if err := s.flushLastUsed(); err != nil && !errors.Is(err, ledger.ErrClosed) {
				s.log.Error("flushing key last-use times failed", zap.Error(err))
			}
		}
	}
}

// tick is a channel that ticks every d, or never for d < 0, and the function that stops it.
func tick(d time.Duration) (<-chan time.Time, func()) {
	if d < 0 {
		return nil, func() {}
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// read admits a read (ErrClosed after Close) and bounds it by the query timeout; the caller's
// cancellation ends it too. Call done when the read is over.
func (s *Postgres) read(ctx context.Context) (qctx context.Context, done func(), err error) {
	return s.admit(ctx, s.opts.QueryTimeout)
}

// write admits a change and bounds it by the query timeout, but ignores the caller's
// cancellation: a change that was asked for is carried out or fails by itself (ledger/roles.go).
func (s *Postgres) write(ctx context.Context) (wctx context.Context, done func(), err error) {
	return s.admit(context.WithoutCancel(ctx), s.opts.QueryTimeout)
}

func (s *Postgres) admit(ctx context.Context, timeout time.Duration) (context.Context, func(), error) {
	if err := s.life.Begin(); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, func() { cancel(); s.life.End() }, nil
}

// bound bounds a query of a call admitted already by the query timeout.
func (s *Postgres) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.QueryTimeout)
}

// Health reports whether the database answers within HealthTimeout: nil, or ErrUnavailable with
// the reason, or ErrClosed.
func (s *Postgres) Health(ctx context.Context) error {
	if err := s.life.Begin(); err != nil {
		return err
	}
	defer s.life.End()
	ctx, cancel := context.WithTimeout(ctx, s.opts.HealthTimeout)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("%w: the database does not answer: %w", ledger.ErrUnavailable, err)
	}
	return nil
}

// Close stops the background work, waits for calls in flight, commits what is queued, writes
// the keys' last-use times and closes the connections. It is safe to call more than once.
func (s *Postgres) Close() error {
	return s.life.Shutdown(func() error {
		s.c.close()
		var err error
		if werr := s.writeLastUsed(); werr != nil {
			err = fmt.Errorf("flushing key last-use times: %w", werr)
		}
		s.pool.Close()
		return err
	})
}

// Interface guards
var _ ledger.Store = (*Postgres)(nil)

// now is the store's clock (PostgresOptions.Now).
func (s *Postgres) now() time.Time { return s.opts.Now() }
