package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Postgres is the Store kept in a PostgreSQL database, shared by every Caddy instance that opens
// the same database. Create it with OpenPostgres.
//
// Unlike Badger it keeps no authoritative state in memory: every call reads or changes the
// database, so what one instance did is what the next call on any instance sees. The only
// exception is API keys' last-use times, noted in memory and written every
// LastUsedFlushInterval (postgres_keys.go). Changes of credits go through the group committer
// (postgres_commit.go).
type Postgres struct {
	pool *pgxpool.Pool
	opts PostgresOptions
	log  *zap.Logger
	c    *pgCommitter
	used lastUses // keys' last-use times not yet written (postgres_keys.go)

	// closeMu is held shared by every call and exclusively by Close, so Close waits for the
	// calls in flight.
	closeMu   sync.RWMutex
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stopBg    chan struct{}
	bg        sync.WaitGroup
}

// OpenPostgres connects to the database at url (a PostgreSQL URL or key=value string, as
// pgxpool.ParseConfig reads it), brings its schema up to date (postgres_migrate.go) and starts
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
		return nil, fmt.Errorf("opening ledger: database url: %w: %w", ErrInvalidArgument, err)
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
	// The migrations may wait for another instance's: their lock has its own bound.
	if err := migratePostgres(ctx, pool, opts.Logger); err != nil {
		pool.Close()
		return nil, pgErr(ctx, "opening ledger", err)
	}
	s := &Postgres{
		pool:   pool,
		opts:   opts,
		log:    opts.Logger,
		c:      newPgCommitter(pool, opts.QueryTimeout, opts.Logger),
		stopBg: make(chan struct{}),
	}
	s.every(opts.SweepInterval, func() {
		if n, err := s.sweep(context.Background()); err != nil && !errors.Is(err, ErrClosed) {
			s.log.Error("hold expiry sweep failed", zap.Error(err))
		} else if n > 0 {
			s.log.Info("voided expired holds", zap.Int("holds", n))
		}
	})
	s.every(opts.LastUsedFlushInterval, func() {
		if err := s.flushLastUsed(); err != nil && !errors.Is(err, ErrClosed) {
			s.log.Error("flushing key last-use times failed", zap.Error(err))
		}
	})
	return s, nil
}

// every runs f every d until Close; d < 0 disables it.
func (s *Postgres) every(d time.Duration, f func()) {
	if d < 0 {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-s.stopBg:
				return
			case <-t.C:
				f()
			}
		}
	}()
}

// begin admits a call; end releases it.
func (s *Postgres) begin() error {
	s.closeMu.RLock()
	if s.closed.Load() {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *Postgres) end() { s.closeMu.RUnlock() }

// readCtx bounds a read by the query timeout; the caller's cancellation ends it too.
func (s *Postgres) readCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.QueryTimeout)
}

// writeCtx bounds a change by the query timeout but ignores the caller's cancellation: a change
// that was asked for is carried out or fails by itself (roles.go).
func (s *Postgres) writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.opts.QueryTimeout)
}

// Health reports whether the database answers within HealthTimeout: nil, or ErrUnavailable with
// the reason, or ErrClosed.
func (s *Postgres) Health(ctx context.Context) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	ctx, cancel := context.WithTimeout(ctx, s.opts.HealthTimeout)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("%w: the database does not answer: %w", ErrUnavailable, err)
	}
	return nil
}

// Close stops the background work, waits for calls in flight, commits what is queued, writes
// the keys' last-use times and closes the connections. It is safe to call more than once.
func (s *Postgres) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stopBg)
		s.bg.Wait()
		s.closeMu.Lock()
		defer s.closeMu.Unlock()
		s.c.close()
		if err := s.writeLastUsed(); err != nil {
			s.closeErr = fmt.Errorf("flushing key last-use times: %w", err)
		}
		s.pool.Close()
	})
	return s.closeErr
}

// Interface guards
var _ Store = (*Postgres)(nil)
