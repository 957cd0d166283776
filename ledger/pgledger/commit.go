package pgledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The PostgreSQL engine's group commit. Every change of credits (hold, settle, void, grant,
// refill, and the sweep's voids) is a call of a server-side function (migrations)
// that locks its account's row, decides, writes, and returns its outcome as a row instead of
// raising. A committer goroutine per store takes every call queued while the previous
// transaction was in flight and sends them as one pgx.Batch: one pipeline, one round trip, one
// implicit transaction, one commit (one WAL flush) for all of them. Each caller gets its own
// row back; an expected refusal (no credit, a repeated request id) is a row like any other and
// does not disturb the others. The hold operations (hold, settle, void, expire) that are next to
// each other in the batch go as one call of ledger_holds, with arrays, so that a hot account's
// row is locked, read and written once per batch rather than once per hold, and a batch over
// many accounts costs a few statements rather than a few per account. A lone hold operation (every
// one at one caller) goes as ledger_hold instead, with plain values: the arrays would cost more
// than the hold.
//
// Order and locks. Within a batch the calls are sorted by account id, keeping queue order per
// account, so every transaction of every instance locks account rows in the same (ascending)
// order: two instances' batches wait for each other but never deadlock. One hot account is one
// row lock held through one commit per batch, not per call: that is what lets two instances
// share it at thousands of holds a second.
//
// Failures. If a statement fails (a bug, or data PostgreSQL cannot store), the whole transaction
// rolls back; the calls are then run again one transaction each, so that only the faulty one
// fails. If the connection fails or the query timeout passes, every caller of the batch gets
// ErrUnavailable: the outcome is unknown (the commit may have happened just before), and every
// function is safe to repeat except an unreferenced grant, so nothing is retried blindly. A
// grant whose batch was sent (so whose commit may have happened) is answered ErrOutcomeUnknown
// as well: a retry with the same Reference makes it once.

const pgMaxBatch = 256

// pgCall is one queued call: a hold operation, or a statement of its own.
type pgCall struct {
	acct string    // orders the batch
	hold *pgHoldOp // a hold operation (holds.go), sent with its neighbours
	sql  string    // otherwise the statement, its arguments, and what reads its row
	args []any
	scan func(pgx.Row) error
	err  error
	done chan struct{}
	// outcomeUnknown: a call that is not safe to repeat blindly (a grant) is answered
	// ErrOutcomeUnknown, not only ErrUnavailable, where the connection failed after its batch
	// was sent: the commit may have happened.
	outcomeUnknown bool
	// deadline is the call's time in the committer (queued, then sent): the timeout from its
	// enqueue. A database that hangs (stopped, frozen, a lost connection) fails a call with
	// ErrUnavailable by then, however many batches were ahead of it; the caller never waits
	// for the ledger longer than the ledger's own timeout.
	deadline time.Time
}

type pgCommitter struct {
	pool    *pgxpool.Pool
	timeout time.Duration
	log     *zap.Logger

	mu      sync.Mutex
	queue   []*pgCall
	closed  bool
	wake    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	// batches and calls count what was sent, for benchmarks (calls per batch).
	batches, calls atomic.Int64
	// now is the ledger's clock: each batch tells it to the database (textgen.now), so that
	// ledger_lock expires the credits due by it (migrations/00018).
	now func() time.Time
}

func newPgCommitter(pool *pgxpool.Pool, timeout time.Duration, log *zap.Logger, now func() time.Time) *pgCommitter {
	c := &pgCommitter{
		pool:    pool,
		now:     now,
		timeout: timeout,
		log:     log,
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go c.run()
	return c
}

// call queues a statement for account acct and waits for its outcome: scan's error, or the
// batch's. It does not give up when the caller's context is canceled (ledger/roles.go); the batch has
// its own deadline.
func (c *pgCommitter) call(acct, sql string, scan func(pgx.Row) error, args ...any) error {
	return c.enqueue(&pgCall{acct: acct, sql: sql, args: args, scan: scan}).wait()
}

// enqueue queues op; wait for it with op.wait.
func (c *pgCommitter) enqueue(op *pgCall) *pgCall {
	op.done = make(chan struct{})
	op.deadline = time.Now().Add(c.timeout)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		op.err = ledger.ErrClosed
		close(op.done)
		return op
	}
	c.queue = append(c.queue, op)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return op
}

// wait returns the call's outcome once its batch is done.
func (op *pgCall) wait() error {
	<-op.done
	return op.err
}

// run commits batches until close; it drains the queue once more after the stop.
func (c *pgCommitter) run() {
	defer close(c.stopped)
	for stopping := false; !stopping; c.drain() {
		select {
		case <-c.wake:
		case <-c.stop:
			stopping = true
		}
	}
}

// close commits what is queued and stops the goroutine; later calls fail with ErrClosed.
func (c *pgCommitter) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.stopped
}

func (c *pgCommitter) drain() {
	for {
		c.mu.Lock()
		n := min(len(c.queue), pgMaxBatch)
		batch := slices.Clone(c.queue[:n])
		c.queue = c.queue[n:]
		if len(c.queue) == 0 {
			c.queue = nil
		}
		c.mu.Unlock()
		if n == 0 {
			return
		}
		if batch = c.expire(batch); len(batch) == 0 {
			continue
		}
		slices.SortStableFunc(batch, func(a, b *pgCall) int { return strings.Compare(a.acct, b.acct) })
		c.commit(batch)
	}
}

// expire fails the calls of batch whose deadline passed while they were queued (behind batches
// that hung on the database) without sending them, and returns the others.
func (c *pgCommitter) expire(batch []*pgCall) []*pgCall {
	now := time.Now()
	live := batch[:0]
	for _, op := range batch {
		if op.deadline.IsZero() || now.Before(op.deadline) {
			live = append(live, op)
			continue
		}
		op.err = fmt.Errorf("committing ledger changes: %w: queued for the query timeout (%s) behind calls the database did not answer", ledger.ErrUnavailable, c.timeout)
		close(op.done)
	}
	return live
}

// commit runs batch as one transaction and wakes its callers.
func (c *pgCommitter) commit(batch []*pgCall) {
	c.batches.Add(1)
	c.calls.Add(int64(len(batch)))
	err := c.send(batch)
	var pe *pgconn.PgError
	if err != nil && errors.As(err, &pe) && len(batch) > 1 {
		// A statement failed and the transaction rolled back as a whole: run each call alone,
		// so that only the one at fault fails.
		c.log.Warn("a ledger batch failed; running its calls one by one", zap.Int("calls", len(batch)), zap.Error(err))
		for _, op := range batch {
			c.commit([]*pgCall{op})
		}
		return
	}
	for _, op := range batch {
		if err != nil {
			op.err = pgErr(context.Background(), "committing ledger changes", err)
			if op.outcomeUnknown && pgMaybeCommitted(err) {
				op.err = fmt.Errorf("%w: %w", ledger.ErrOutcomeUnknown, op.err)
			}
		}
		close(op.done)
	}
}

// send sends batch as one pipeline and reads every call's row. Its error is the batch's: a
// call's own outcome is in op.err only when the batch committed.
func (c *pgCommitter) send(batch []*pgCall) error {
	// The batch ends by the deadline of its oldest call (a call made without enqueue has none:
	// the timeout from now).
	deadline := time.Now().Add(c.timeout)
	for _, op := range batch {
		if !op.deadline.IsZero() && op.deadline.Before(deadline) {
			deadline = op.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('textgen.now', $1, true)`, strconv.FormatInt(c.now().UTC().UnixNano(), 10))
	var stmts [][]*pgCall // the calls of each queued statement
	for i := 0; i < len(batch); {
		j := i + 1
		if op := batch[i]; op.hold == nil {
			b.Queue(op.sql, op.args...)
		} else {
			for j < len(batch) && batch[j].hold != nil {
				j++
			}
			sql, args := pgHoldsCall(batch[i:j])
			b.Queue(sql, args...)
		}
		stmts = append(stmts, batch[i:j])
		i = j
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return pgNotSent{err}
	}
	defer conn.Release()
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return err
	}
	for _, calls := range stmts {
		if calls[0].hold == nil {
			calls[0].err = calls[0].scan(br.QueryRow())
			continue
		}
		err := readHolds(br, calls)
		for _, op := range calls {
			op.err = err
		}
	}
	// Close reads up to the end of the implicit transaction: nil means it committed.
	return br.Close()
}

// pgNotSent is the error of a batch that was never sent: no connection could be had.
type pgNotSent struct{ err error }

func (e pgNotSent) Error() string { return e.err.Error() }
func (e pgNotSent) Unwrap() error { return e.err }

// pgMaybeCommitted reports whether a batch that failed with err may have committed: the
// connection failed (or the deadline passed) after the batch was sent, before its answer came.
// A batch never sent, or one the server answered with an error (the transaction rolled back),
// did not.
func pgMaybeCommitted(err error) bool {
	var pe *pgconn.PgError
	var ns pgNotSent
	return !errors.As(err, &ns) && !errors.As(err, &pe) && !pgconn.SafeToRetry(err)
}
