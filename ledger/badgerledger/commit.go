package badgerledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The committer is the ledger's group commit. Callers change the in-memory state under their
// account's mutex and, still under it, enqueue the blind writes that record the change; one
// goroutine takes everything queued, commits it as ONE Badger transaction (one sync) and wakes
// the callers. Per-account order is the queue order, and since every batch is one atomic
// transaction, the directory always holds a prefix of the queue: after a crash each account's
// balance record matches its entries.
//
// Why not one Badger transaction per operation with txn.CommitWith: Badger does keep the order
// of CommitWith calls (commitAndSend pushes to the write channel under orc.writeChLock), and it
// does batch requests into one value-log write, but writeToLSM syncs the memtable WAL once per
// request, so with SyncWrites each operation still pays its own msync. Measured on the 2-core
// machine: about 1,700 hold+settle/s at 1, 8 or 64 callers that way, versus about 6,900 (8
// callers) and 31,000 (64 callers) with this committer.

const (
	maxBatchOps   = 256
	maxBatchBytes = 512 << 10 // well under Badger's 15% of memTableSize per transaction
	// lazyDelay is how long a lazy operation (enqueueLazy) may wait for a batch to ride in.
	lazyDelay = 20 * time.Millisecond

	// The group window: while at least groupSiblings generations are open (their settles will
	// come), a commit waits up to groupWait for more operations to share its sync, or until
	// groupOps are queued. Every commit is a WAL msync that costs CPU as much as time; under
	// load, committing each settle as it came cost about one commit a request. Below
	// groupSiblings nothing waits, so one client's requests see no delay (PostgreSQL's
	// commit_delay and commit_siblings work the same way). The wait delays only what follows a
	// settle (the end of a plain-text answer, the last event), never a first byte: at 64 clients
	// of instant generations, 2 ms against 0.5 ms halved the msync's CPU a request.
	groupWait     = 2 * time.Millisecond
	groupSiblings = 8
	groupOps      = 64
)

// write is one blind write of an operation.
type write struct {
	key       []byte
	val       []byte
	del       bool
	expiresAt uint64 // unix seconds; 0 = never
	// fresh: the key was never written before (setFresh); skip: the batch leaves it out
	// (cancelFresh).
	fresh, skip bool
}

func set(k, v []byte) write { return write{key: k, val: v} }
func del(k []byte) write    { return write{key: k, del: true} }

// setFresh is set of a key that was never written before, so that a del of it later in the
// same batch cancels both (cancelFresh): an open hold's marker, made by the hold and deleted by
// its settle, which under load ride in the same commit.
func setFresh(k, v []byte) write { return write{key: k, val: v, fresh: true} }

// cancelFresh leaves out of a batch each fresh set together with the del of the same key that
// follows it: the key was not on disk before the batch and is not after it, and the batch
// commits whole, so neither write changes what the disk holds; written, they were a key and a
// tombstone in the memtable, the write-ahead log and every compaction after.
func cancelFresh(batch []*pendingOp) {
	var fresh map[string]*write
	for _, op := range batch {
		for i := range op.writes {
			w := &op.writes[i]
			if w.fresh {
				if fresh == nil {
					fresh = map[string]*write{}
				}
				fresh[string(w.key)] = w
				continue
			}
			if f, ok := fresh[string(w.key)]; ok {
				if w.del {
					f.skip, w.skip = true, true
				}
				delete(fresh, string(w.key)) // a plain set after it: both stay
			}
		}
	}
}

type pendingOp struct {
	writes []write
	id     uint64
	done   chan error
}

func (op *pendingOp) size() int {
	n := 0
	for _, w := range op.writes {
		n += len(w.key) + len(w.val) + 16
	}
	return n
}

// wait blocks until the operation is durable (or failed).
func (op *pendingOp) wait() error { return <-op.done }

// waitCtx is wait for a caller that may stop waiting: when ctx ends first, the operation stays
// queued and may still be made, so the answer is ErrOutcomeUnknown.
func (op *pendingOp) waitCtx(ctx context.Context) error {
	select {
	case err := <-op.done:
		return err
	case <-ctx.Done():
		select {
		case err := <-op.done: // it ended as well: its outcome is known
			return err
		default:
		}
		return fmt.Errorf("%w (it is still queued: %v)", ledger.ErrOutcomeUnknown, ctx.Err())
	}
}

type committer struct {
	db    *badger.DB
	log   *zap.Logger
	space *spaceGuard // checked before every commit (space.go)

	mu     sync.Mutex
	queue  []*pendingOp
	nextID uint64
	failed error // sticky: after a failed commit memory may be ahead of disk

	durable atomic.Uint64 // id of the last operation known to be committed
	queued  atomic.Uint64 // id of the last operation queued (nextID, read without mu)
	commits atomic.Uint64 // Badger transactions committed (for tests)
	lazy    *time.Timer   // wakes the committer for lazy operations; armed while one waits (mu)
	lazyOn  bool
	// lazyWait is how long a lazy operation may wait for a batch (lazyDelay; tests change it).
	lazyWait time.Duration
	// siblings counts the generations open now (the store's open holds); nil: never wait.
	siblings func() int64
	// groupWait is the group window (groupWait; tests change it); full ends it early once
	// gathering (mu) sees groupOps queued.
	groupWait time.Duration
	gathering bool
	full      chan struct{}
	urgent    bool // an operation queued with enqueueNow waits (mu)
	snap      atomic.Pointer[snapshot]
	wake      chan struct{}
	stop      chan struct{}
	stopped   chan struct{}
}

func newCommitter(db *badger.DB, log *zap.Logger, space *spaceGuard) *committer {
	c := &committer{
		db:      db,
		log:     log,
		space:   space,
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),

		lazyWait:  lazyDelay,
		groupWait: groupWait,
		full:      make(chan struct{}, 1),
	}
	c.publish(0)
	go c.run()
	return c
}

// snapshot is a read-only transaction that sees every operation up to upTo. Checks that run
// under an account's mutex ("was this request id held before?") read it instead of opening a
// transaction of their own, because Badger's NewTransaction waits until the commit in flight
// is done (oracle.readTs -> txnMark.WaitForMark): under the mutex that would serialise the
// account behind every sync. The committer, the only writer, makes a new snapshot right after
// each commit, when nothing is in flight, so making it never waits either.
type snapshot struct {
	txn  *badger.Txn
	upTo uint64
	refs atomic.Int64 // one for being current, one per user
}

// get reads one value from the snapshot; ok is false when the key does not exist.
func (s *snapshot) get(k []byte) ([]byte, bool, error) { return getValue(s.txn, k) }

func (c *committer) publish(upTo uint64) {
	c.mu.Lock()
	db := c.db
	c.mu.Unlock()
	n := &snapshot{txn: db.NewTransaction(false), upTo: upTo}
	n.refs.Store(1)
	if old := c.snap.Swap(n); old != nil {
		c.release(old)
	}
}

// acquire returns the current snapshot; release it when done.
func (c *committer) acquire() *snapshot {
	for {
		s := c.snap.Load()
		// refs is 0 only for a snapshot already replaced and discarded; load the new one.
		if r := s.refs.Load(); r > 0 && s.refs.CompareAndSwap(r, r+1) {
			return s
		}
	}
}

func (c *committer) release(s *snapshot) {
	if s.refs.Add(-1) == 0 {
		s.txn.Discard() // read-only: only marks the read done, safe from any goroutine
	}
}

// swapDB makes the committer write to db from now on. Called with no operation in flight (the
// store's CloseMu held exclusively), when a read-only store is reopened for writing.
func (c *committer) swapDB(db *badger.DB) {
	c.mu.Lock()
	c.db = db
	c.mu.Unlock()
	c.publish(c.durable.Load())
}

// err reports the sticky failure, if any.
func (c *committer) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// enqueue queues an operation's writes. Callers that need per-account order call it with the
// account's mutex held. An operation with no writes is a barrier: when it is done, every
// operation queued before it is durable.
func (c *committer) enqueue(ws []write) *pendingOp {
	op := c.queueOp(ws, false, false)
	c.wakeUp()
	return op
}

// enqueueNow is enqueue for an operation a client's first byte waits for (an Idempotency-Key's
// record): it ends the group window, so it never waits for company.
func (c *committer) enqueueNow(ws []write) *pendingOp {
	op := c.queueOp(ws, false, true)
	c.wakeUp()
	return op
}

// enqueueLazy queues an operation that nobody waits for yet (a Reserve's hold): it is committed
// with the next batch some other operation starts, or lazyDelay after it was queued, whichever
// comes first. Queue order, and so every guarantee of enqueue, is unchanged; only the sync is
// shared. A generation faster than lazyDelay so costs one commit (its hold rides with its
// settle) instead of two, and its hold's sync never runs beside the call to the model.
func (c *committer) enqueueLazy(ws []write) *pendingOp {
	return c.queueOp(ws, true, false)
}

func (c *committer) queueOp(ws []write, lazy, now bool) *pendingOp {
	op := &pendingOp{writes: ws, done: make(chan error, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		op.done <- c.failed
		return op
	}
	c.nextID++
	op.id = c.nextID
	c.queued.Store(c.nextID)
	c.queue = append(c.queue, op)
	c.urgent = c.urgent || now
	if c.gathering && (len(c.queue) >= groupOps || now) {
		c.gathering = false
		c.full <- struct{}{} // cap 1, and sent once per gathering
	}
	if lazy && !c.lazyOn {
		c.lazyOn = true
		if c.lazy == nil {
			c.lazy = time.AfterFunc(c.lazyWait, c.lazyFired)
		} else {
			c.lazy.Reset(c.lazyWait)
		}
	}
	return op
}

func (c *committer) lazyFired() {
	c.mu.Lock()
	c.lazyOn = false
	c.mu.Unlock()
	c.wakeUp()
}

func (c *committer) wakeUp() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// barrier waits until every operation queued so far is durable.
func (c *committer) barrier() error { return c.enqueue(nil).wait() }

// waitFor returns once operation id is durable: at once if it is, else after a barrier. A
// repeated call (a retried hold, grant or Idempotency-Key) reports the first outcome only once
// that outcome cannot be lost.
func (c *committer) waitFor(id uint64) error {
	if id <= c.durable.Load() {
		return nil
	}
	return c.barrier()
}

func (c *committer) run() {
	defer close(c.stopped)
	for {
		select {
		case <-c.wake:
			c.drain()
		case <-c.stop:
			c.drain()
			return
		}
	}
}

// close commits what is queued and stops the goroutine. Later enqueues fail.
func (c *committer) close() {
	close(c.stop)
	<-c.stopped
	c.mu.Lock()
	if c.lazy != nil {
		c.lazy.Stop()
	}
	c.mu.Unlock()
	if s := c.snap.Swap(nil); s != nil {
		c.release(s)
	}
	c.mu.Lock()
	if c.failed == nil {
		c.failed = ledger.ErrClosed
	}
	c.mu.Unlock()
}

func (c *committer) drain() {
	for {
		c.gather()
		batch := c.take()
		if len(batch) == 0 {
			return
		}
		c.commit(batch)
	}
}

// gather holds the next commit back for the group window while enough generations are open
// that more settles are coming; it returns at once otherwise, or when groupOps are queued.
func (c *committer) gather() {
	if c.siblings == nil || c.siblings() < groupSiblings {
		return
	}
	c.mu.Lock()
	if len(c.queue) == 0 || len(c.queue) >= groupOps || c.urgent {
		c.mu.Unlock()
		return
	}
	c.gathering = true
	wait := c.groupWait
	c.mu.Unlock()
	t := time.NewTimer(wait)
	select {
	case <-c.full:
	case <-t.C:
	case <-c.stop:
	}
	t.Stop()
	c.mu.Lock()
	c.gathering = false
	select { // a signal sent just as the timer fired
	case <-c.full:
	default:
	}
	c.mu.Unlock()
}

func (c *committer) take() []*pendingOp {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, bytes := 0, 0
	for n < len(c.queue) && n < maxBatchOps {
		bytes += c.queue[n].size()
		if n > 0 && bytes > maxBatchBytes {
			break
		}
		n++
	}
	batch := c.queue[:n:n]
	if n == len(c.queue) {
		c.queue = nil
		c.urgent = false
	} else {
		c.queue = c.queue[n:]
	}
	return batch
}

func (c *committer) commit(batch []*pendingOp) {
	err := c.err()
	if err == nil {
		if hasWrites(batch) { // a barrier alone writes nothing: it need not wait for space
			c.space.waitForFloor(c.stop)
		}
		var committing bool
		committing, err = c.write(batch)
		if err != nil {
			err = fmt.Errorf("committing ledger writes: %w", err)
			c.log.Error("ledger commit failed; the store refuses further work until it is reopened",
				zap.Error(err), zap.Int("operations", len(batch)))
			c.mu.Lock()
			if c.failed == nil {
				c.failed = err // what later operations get: they were not written
			}
			c.mu.Unlock()
			if committing {
				// The commit itself failed: its writes may have reached Badger's log, which the
				// next open replays.
				err = fmt.Errorf("%w: %w", ledger.ErrOutcomeUnknown, err)
			}
		} else {
			last := batch[len(batch)-1].id
			c.durable.Store(last)
			c.publish(last)
		}
	}
	for _, op := range batch {
		op.done <- err
	}
}

func hasWrites(batch []*pendingOp) bool {
	for _, op := range batch {
		if len(op.writes) > 0 {
			return true
		}
	}
	return false
}

// write commits batch in one transaction. committing reports whether an error came from the
// commit itself (after which the writes may be in Badger's log) rather than before it.
func (c *committer) write(batch []*pendingOp) (committing bool, err error) {
	c.mu.Lock()
	db := c.db
	c.mu.Unlock()
	cancelFresh(batch)
	txn := db.NewTransaction(true)
	defer txn.Discard()
	n := 0
	for _, op := range batch {
		for _, w := range op.writes {
			if w.skip {
				continue
			}
			var err error
			if w.del {
				err = txn.Delete(w.key)
			} else {
				e := badger.NewEntry(w.key, w.val)
				e.ExpiresAt = w.expiresAt
				err = txn.SetEntry(e)
			}
			if err != nil {
				return false, err
			}
			n++
		}
	}
	if n == 0 {
		return false, nil
	}
	err = txn.Commit()
	c.commits.Add(1)
	if errors.Is(err, badger.ErrConflict) {
		// Cannot happen with DetectConflicts off; say so loudly if it ever does.
		return true, fmt.Errorf("unexpected conflict on a blind write: %w", err)
	}
	return err != nil, err
}
