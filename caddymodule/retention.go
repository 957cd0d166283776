package caddymodule

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// Kept generations (Handler.Retention): the text of a charged generation, kept for a window so
// that a client whose stream was cut can fetch or resume it (generations.go) or get it again with
// its Idempotency-Key (idempotency.go).
//
// A running generation keeps its pieces in memory (keptText), where followers on this instance
// read them as they come (liveKept, across config reloads too), and the retention's one flusher
// (keptFlusher) writes each generation to the ledger, sealed (sealer.go), once it has ended: all
// that ended together goes in one ledger call. With a ledger that other instances share
// (PostgreSQL), it also writes the new pieces of every running generation every
// keptFlushInterval, never once per piece, so that followers there (storedSource, polling the
// ledger) see them as they come. With Badger no other process can follow, and a generation
// whose process dies before its end is never charged (its hold is voided at the restart), so
// its running text is not worth a write. A generation that ends without a charge keeps
// nothing: what was written is deleted.

const (
	// keptFlushInterval paces the writes of a running generation's text to a shared ledger.
	keptFlushInterval = 250 * time.Millisecond
	// keptPollInterval paces a follower that reads a generation from the ledger.
	keptPollInterval = 250 * time.Millisecond
	// keptChunkBytes bounds the plain text of one stored chunk (below ledger.MaxGenerationChunk).
	keptChunkBytes = 32 << 10
	// keptWriteTimeout bounds one write of kept text to the ledger.
	keptWriteTimeout = 30 * time.Second
	// keptMaxBytes bounds the text kept of one generation (a model's answer within
	// max_output_tokens is far shorter). A longer generation is not kept at all, and stops once
	// its client has gone.
	keptMaxBytes = 1 << 20
	// keptRetryBytes bounds the text of ended generations that wait for a ledger that cannot take
	// it now (a database that restarts): past it the oldest is given up (its text, never its
	// charge). About 16,000 answers of 4 KiB.
	keptRetryBytes = 64 << 20
)

// errKeptFull stops a detached generation that outgrew keptMaxBytes.
var errKeptFull = errors.New("the generation's text outgrew what is kept of one generation")

// liveKept has every generation that runs on this instance, with text, under its ledger and
// request id: a package's, so that a follower under a new config (a reload) finds a generation
// that began under the old one.
var liveKept sync.Map // liveKey -> *keptText

type liveKey struct {
	store handlerLedger
	rid   string
}

// retention is the handler's keeping of generations.
type retention struct {
	window     time.Duration
	genTimeout time.Duration
	sealer     atomic.Pointer[sealer] // nil until the key is loaded (the app's start)
	shared     bool                   // the ledger is PostgreSQL: other instances may follow
	flusher    keptFlusher
	log        *zap.Logger
	guard      interface {
		Enter() bool
		Exit()
	}
}

// setupRetention prepares Retention and its key (Provision). A key from the config is read now;
// a key file in Caddy's data directory is read or made when the app starts (never by caddy
// validate).
func (h *Handler) setupRetention(app *textgenapp.App) error {
	if h.Retention < 0 {
		return nil
	}
	r := &retention{window: time.Duration(h.Retention), genTimeout: time.Duration(h.GenerationTimeout),
		log: h.logger.Named("retention"), guard: h.inFlight}
	r.flusher.kept, r.flusher.wake = map[*keptText]struct{}{}, make(chan struct{}, 1)
	place, err := textgenapp.LedgerPlacement(h.Ledger)
	if err != nil {
		return err
	}
	r.shared = place.Shared
	h.retain = r
	key := retentionKey(h.RetentionKey)
	if key.Set() {
		k, err := key.FromSetting()
		if err != nil {
			return err
		}
		s, err := newSealer(k)
		if err != nil {
			return fmt.Errorf("retention_key: %w", err)
		}
		r.sealer.Store(s)
		return nil
	}
	key.WarnUnshared(h.logger, place.Shared)
	app.OnStart(func() error {
		path := key.Path()
		if place.Dir != "" && within(path, place.Dir) {
			return fmt.Errorf("textgen: retention: the key file %s would be inside the ledger directory %s; set retention_key or move the ledger", path, place.Dir)
		}
		k, err := key.FromFile()
		if err != nil {
			return fmt.Errorf("textgen: retention: %w", err)
		}
		s, err := newSealer(k)
		if err != nil {
			return fmt.Errorf("textgen: retention: %s: %w", path, err)
		}
		r.sealer.Store(s)
		return nil
	})
	return nil
}

// keptText is one generation's text while it runs on this instance.
type keptText struct {
	r     *retention
	store handlerLedger
	rec   ledger.GenerationRecord // the fixed fields

	mu       sync.Mutex
	pieces   []string
	bytes    int64
	state    ledger.GenerationState
	tokens   int
	reason   string // finish reason of a completed generation ("stop", "length")
	finished time.Time
	voided   bool          // ended without a charge, or too long: followers stop, nothing is kept
	overflow bool          // outgrew keptMaxBytes: nothing is kept
	changed  chan struct{} // made by a waiting follower, closed at the next change
	started  bool          // the first piece came: the flusher has it
	ended    bool          // the generation has ended: its last write is due
	stopped  chan struct{} // closed when the flusher has written its last
	// The flusher's own: what the ledger has.
	flushed      int // pieces
	flushedBytes int64
	chunks       int
	written      bool
	retrying     bool // its end waits for a retry (later)
	let          bool // stopped is closed
}

// newKept prepares the keeping of g's text; nil when the key is not loaded yet.
func (r *retention) newKept(g *generation) *keptText {
	if r.sealer.Load() == nil {
		return nil
	}
	t := now().UTC()
	return &keptText{r: r, store: g.store, state: ledger.GenerationRunning, stopped: make(chan struct{}),
		rec: ledger.GenerationRecord{AccountID: g.caller.acct.ID, RequestID: g.id, Mode: g.caller.key.Mode, Tool: g.ask.tool.Slug,
			Language: g.ask.lang, Created: t, Expires: t.Add(r.genTimeout + r.window)}}
}

// add keeps one piece; the first one makes the generation visible to followers here and hands
// it to the flusher.
// It reports false once the text has outgrown keptMaxBytes: from then on nothing is kept.
func (k *keptText) add(piece string) bool {
	k.mu.Lock()
	if k.overflow || k.bytes+int64(len(piece)) > keptMaxBytes {
		if !k.overflow {
			k.overflow, k.voided = true, true
			k.notify()
		}
		k.mu.Unlock()
		return false
	}
	k.pieces = append(k.pieces, piece)
	k.bytes += int64(len(piece))
	first := !k.started
	k.started = true
	k.notify()
	k.mu.Unlock()
	if first {
		liveKept.Store(liveKey{k.store, k.rec.RequestID}, k)
		k.r.flusher.add(k.r, k)
	}
	return true
}

// notify wakes the followers waiting for a change. Called with k.mu held.
func (k *keptText) notify() {
	if k.changed != nil {
		close(k.changed)
		k.changed = nil
	}
}

// end records the end of a charged generation: its final state goes to the ledger, then it is
// read from there. It waits for the last write when wait is set.
func (k *keptText) end(state ledger.GenerationState, tokens int, reason string, wait bool) {
	k.mu.Lock()
	if !k.started {
		k.mu.Unlock()
		return
	}
	k.state, k.tokens, k.reason, k.finished, k.ended = state, tokens, reason, now().UTC(), true
	k.notify()
	k.mu.Unlock()
	k.r.flusher.due()
	if wait {
		<-k.stopped
	}
}

// discard ends a generation that was not charged: followers stop, and whatever reached the
// ledger is deleted.
func (k *keptText) discard() {
	k.mu.Lock()
	if !k.started {
		k.mu.Unlock()
		return
	}
	k.voided, k.ended = true, true
	k.notify()
	k.mu.Unlock()
	k.r.flusher.due()
	<-k.stopped
}

// keptFlusher writes the kept text of a retention's generations: one goroutine, while any runs
// on this instance. It writes whatever has ended at once, in one ledger call per ledger (ends
// that come while it writes go together in its next call), and with a shared ledger every
// keptFlushInterval the new pieces of all that run.
type keptFlusher struct {
	mu      sync.Mutex
	kept    map[*keptText]struct{} // started and not yet written to their end
	running bool
	wake    chan struct{} // one buffered signal: something has ended
	// The flusher's own: the ended generations that wait for a retry, and their text's bytes.
	retrying   int
	retryBytes int64
	failing    bool // the last write failed: the next failure is not logged again
}

// add hands a generation that has text to the flusher, starting the flusher if it is idle.
func (w *keptFlusher) add(r *retention, k *keptText) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kept[k] = struct{}{}
	if w.running {
		return
	}
	w.running = true
	if r.guard.Enter() { // the ledger stays open for the flusher even after a reload
		go func() {
			defer r.guard.Exit()
			w.run(r)
		}()
	} else {
		go w.run(r)
	}
}

// due wakes the flusher for a generation that has ended.
func (w *keptFlusher) due() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run is the flusher's loop; it returns once no generation is left. While ended generations wait
// for the ledger it tries them again, retryFirst to retryMax apart, as settles are retried.
func (w *keptFlusher) run(r *retention) {
	var ticks <-chan time.Time
	if r.shared {
		t := time.NewTicker(keptFlushInterval)
		defer t.Stop()
		ticks = t.C
	}
	var retry <-chan time.Time
	pause := retryFirst
	for {
		tick := false
		select {
		case <-ticks:
			tick = true
		case <-w.wake:
		case <-retry:
			retry = nil
		}
		w.mu.Lock()
		var batch []*keptText
		for k := range w.kept {
			k.mu.Lock()
			ended := k.ended
			k.mu.Unlock()
			if tick || ended {
				batch = append(batch, k)
			}
		}
		w.mu.Unlock()
		r.write(batch)
		switch {
		case w.retrying == 0:
			retry, pause = nil, retryFirst
		case retry == nil:
			retry = time.After(pause)
			pause = min(2*pause, retryMax)
		}
		w.mu.Lock()
		if len(w.kept) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}

// write writes what the ledger lacks of the generations in batch: one PutGenerations per
// ledger, and deletes what was written of those that ended without a charge. A generation whose
// end was written leaves the flusher; one whose end the ledger could not take now
// (ErrUnavailable) stays for another try (later).
func (r *retention) write(batch []*keptText) {
	type pending struct {
		k     *keptText
		final bool
		step  keptStep
	}
	var todo []pending
	var puts map[handlerLedger][]ledger.GenerationPut
	for _, k := range batch {
		k.mu.Lock()
		ended, voided := k.ended, k.voided
		k.mu.Unlock()
		if voided {
			if err := k.deleteWritten(); err != nil && !r.later(k, err) {
				r.log.Error("deleting the kept text of a generation that was not charged; it goes at the end of its window",
					zap.String("request_id", k.rec.RequestID), zap.Error(err))
				r.done(k)
			} else if err == nil {
				r.done(k)
			}
			continue
		}
		step, kp := k.prepare(ended)
		if len(kp) == 0 {
			if ended {
				r.done(k)
			}
			continue
		}
		if puts == nil {
			puts = map[handlerLedger][]ledger.GenerationPut{}
		}
		puts[k.store] = append(puts[k.store], kp...)
		todo = append(todo, pending{k, ended, step})
	}
	failed := map[handlerLedger]error{}
	for store, p := range puts {
		ctx, cancel := context.WithTimeout(context.Background(), keptWriteTimeout)
		err := store.PutGenerations(ctx, p...)
		cancel()
		if err != nil {
			// Running generations try again with these pieces at the next tick, ended ones
			// later.
			if !r.flusher.failing {
				r.log.Warn("keeping generated text: the ledger did not take it; trying again", zap.Int("generations", len(p)), zap.Error(err))
			}
			r.flusher.failing = true
			failed[store] = err
		} else {
			r.flusher.failing = false
		}
	}
	for _, t := range todo {
		err := failed[t.k.store]
		if err == nil {
			t.k.wrote(t.step)
		}
		if !t.final || err != nil && r.later(t.k, err) {
			continue
		}
		if err != nil {
			r.log.Error("keeping generated text: given up; its text is lost, not its charge", zap.String("request_id", t.k.rec.RequestID), zap.Error(err))
		} else if t.k.retrying {
			r.log.Info("the ledger took the delayed kept text", zap.String("request_id", t.k.rec.RequestID))
		}
		r.done(t.k)
	}
}

// later keeps an ended generation whose end (its last write, or the delete of one not charged)
// the ledger could not take (err) for another try, as settles are retried (resolve.go): while
// err is ErrUnavailable, the generation's window lasts, and the text of all that wait stays
// within keptRetryBytes (past it the oldest is given up). Its waiters go meanwhile: a replay on
// this instance reads it from memory. It reports false when the generation is given up.
func (r *retention) later(k *keptText, err error) bool {
	w := &r.flusher
	if !errors.Is(err, ledger.ErrUnavailable) || now().After(k.keptUntil()) {
		return false
	}
	if !k.retrying {
		k.retrying = true
		w.retrying++
		w.retryBytes += k.heldBytes()
		r.let(k)
	}
	for w.retryBytes > keptRetryBytes {
		oldest := k
		w.mu.Lock()
		for o := range w.kept {
			if o.retrying && o.heldBytes() > 0 && o.finished.Before(oldest.finished) {
				oldest = o
			}
		}
		w.mu.Unlock()
		r.log.Error("keeping generated text: more waits for the ledger than is kept meanwhile; the oldest is given up (its text, not its charge)",
			zap.String("request_id", oldest.rec.RequestID), zap.Int64("waiting_bytes", w.retryBytes))
		r.done(oldest)
		if oldest == k {
			return true // done already: nothing left to try
		}
	}
	return true
}

// keptUntil is the end of the generation's window: nothing is written past it.
func (k *keptText) keptUntil() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.finished.IsZero() {
		return k.rec.Expires
	}
	return k.finished.Add(k.r.window)
}

// heldBytes is the text the generation holds in memory: none once it ended without a charge.
func (k *keptText) heldBytes() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.voided {
		return 0
	}
	return k.bytes
}

// done takes an ended generation out of the flusher and lets its waiters go.
func (r *retention) done(k *keptText) {
	w := &r.flusher
	w.mu.Lock()
	delete(w.kept, k)
	w.mu.Unlock()
	if k.retrying {
		k.retrying = false
		w.retrying--
		w.retryBytes -= k.heldBytes()
	}
	liveKept.Delete(liveKey{k.store, k.rec.RequestID})
	r.let(k)
}

// let lets the generation's waiters (end, discard) go, once.
func (r *retention) let(k *keptText) {
	if !k.let {
		k.let = true
		close(k.stopped)
	}
}

// deleteWritten deletes what reached the ledger of a generation that was not charged.
func (k *keptText) deleteWritten() error {
	if !k.written {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), keptWriteTimeout)
	defer cancel()
	return k.store.DeleteGeneration(ctx, k.rec.AccountID, k.rec.RequestID)
}

// keptStep is what one write adds to what the ledger has of a generation.
type keptStep struct {
	pieces, chunks int
	bytes          int64
}

// prepare returns the puts that bring the ledger up to date with the pieces kept so far, each
// within ledger.MaxGenerationPut; at the end (final), the record's final state even without new
// pieces. Only the last put carries the final state, so that a reader never takes a record for
// ended before it has every piece. The flusher alone calls it.
func (k *keptText) prepare(final bool) (keptStep, []ledger.GenerationPut) {
	k.mu.Lock()
	pieces := k.pieces[k.flushed:]
	rec := k.rec
	rec.State, rec.OutputTokens, rec.FinishReason, rec.Finished = k.state, k.tokens, k.reason, k.finished
	all := k.pieces // no piece comes after the end: hashed outside the lock
	k.mu.Unlock()
	var digest []byte
	if final {
		digest = textDigest(all) // receipts.go: the signed receipt's text_sha256
	}
	if len(pieces) == 0 && !final {
		return keptStep{}, nil
	}
	if final {
		rec.Expires = rec.Finished.Add(k.r.window)
	}
	s := k.r.sealer.Load()
	chunks := encodePieces(pieces)
	var step keptStep
	var puts []ledger.GenerationPut
	for len(chunks) > 0 || len(puts) == 0 {
		var sealed [][]byte
		size, n, b := 0, 0, int64(0)
		for len(chunks) > 0 {
			c := chunks[0]
			sc := s.seal(rec.AccountID, rec.RequestID, k.chunks+step.chunks+len(sealed), c.data)
			if len(sealed) > 0 && size+len(sc) > ledger.MaxGenerationPut {
				break
			}
			sealed, size, n, b = append(sealed, sc), size+len(sc), n+c.pieces, b+c.bytes
			chunks = chunks[1:]
		}
		put := rec
		put.Pieces, put.Bytes = k.flushed+step.pieces+n, k.flushedBytes+step.bytes+b
		if len(chunks) > 0 || !final {
			put.State, put.Finished, put.Expires = ledger.GenerationRunning, time.Time{}, k.rec.Expires
		}
		gp := ledger.GenerationPut{Record: put, First: k.chunks + step.chunks, Chunks: sealed}
		if len(chunks) == 0 && final {
			// The handler made the request id for this generation, and a retry hashes the
			// same pieces: the ledger need not look for another digest first.
			gp.TextSHA256, gp.NewID = digest, true
		}
		puts = append(puts, gp)
		step.pieces, step.bytes, step.chunks = step.pieces+n, step.bytes+b, step.chunks+len(sealed)
	}
	return step, puts
}

// wrote records that the ledger took step.
func (k *keptText) wrote(step keptStep) {
	k.written = true
	k.chunks += step.chunks
	k.flushed += step.pieces
	k.flushedBytes += step.bytes
}

// keptChunk is the plain text of one stored chunk: framed pieces.
type keptChunk struct {
	data   []byte
	pieces int
	bytes  int64
}

// encodePieces frames pieces (a uvarint length before each) into chunks of about keptChunkBytes,
// so that a reader gets the pieces back as they were streamed (an SSE event each).
func encodePieces(pieces []string) []keptChunk {
	var out []keptChunk
	var cur keptChunk
	for _, p := range pieces {
		if cur.pieces > 0 && len(cur.data)+len(p)+binary.MaxVarintLen64 > keptChunkBytes {
			out = append(out, cur)
			cur = keptChunk{}
		}
		cur.data = binary.AppendUvarint(cur.data, uint64(len(p)))
		cur.data = append(cur.data, p...)
		cur.pieces++
		cur.bytes += int64(len(p))
	}
	if cur.pieces > 0 {
		out = append(out, cur)
	}
	return out
}

// decodePieces reverses encodePieces for one chunk.
func decodePieces(dst []string, chunk []byte) ([]string, error) {
	for len(chunk) > 0 {
		n, w := binary.Uvarint(chunk)
		if w <= 0 || uint64(len(chunk)-w) < n {
			return dst, errors.New("malformed kept chunk")
		}
		dst = append(dst, string(chunk[w:w+int(n)]))
		chunk = chunk[w+int(n):]
	}
	return dst, nil
}

// keptView is one look at a kept generation: its record and every piece so far.
type keptView struct {
	rec    ledger.GenerationRecord
	pieces []string
	bytes  int64
	voided bool // it ended without a charge (followers that attached while it ran see this)
}

func (v keptView) ended() bool { return v.voided || v.rec.State != ledger.GenerationRunning }

// keptSource gives the views of one kept generation, as it runs and after.
type keptSource interface {
	// next returns a view with more than have pieces, or the generation's end, waiting for it.
	next(ctx context.Context, have int) (keptView, error)
}

// next waits for the live generation to have more than have pieces or to end.
func (k *keptText) next(ctx context.Context, have int) (keptView, error) {
	for {
		k.mu.Lock()
		if len(k.pieces) > have || k.state != ledger.GenerationRunning || k.voided {
			v := keptView{rec: k.rec, pieces: k.pieces[:len(k.pieces):len(k.pieces)], bytes: k.bytes, voided: k.voided}
			v.rec.State, v.rec.OutputTokens, v.rec.FinishReason, v.rec.Finished, v.rec.Pieces, v.rec.Bytes = k.state, k.tokens, k.reason, k.finished, len(k.pieces), k.bytes
			if !k.finished.IsZero() {
				v.rec.Expires = k.finished.Add(k.r.window)
			}
			k.mu.Unlock()
			return v, nil
		}
		if k.changed == nil {
			k.changed = make(chan struct{})
		}
		ch := k.changed
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return keptView{}, ctx.Err()
		}
	}
}

// storedSource reads a generation from the ledger: one that ran on another instance (a shared
// PostgreSQL ledger), or on this one before it ended or before a reload.
type storedSource struct {
	r            *retention
	store        handlerLedger
	acct, rid    string
	chunks       int
	pieces       []string
	bytes        int64
	seen         bool // the record was found once
	waitForStart time.Time
}

// next polls the ledger until the generation has more than have pieces or has ended. A record
// still "running" long after any generation could (its instance died) ends as interrupted.
func (s *storedSource) next(ctx context.Context, have int) (keptView, error) {
	sl := s.r.sealer.Load()
	for {
		rec, chunks, err := s.store.GetGeneration(ctx, s.acct, s.rid, s.chunks)
		switch {
		case errors.Is(err, ledger.ErrNotFound) && s.seen:
			// Deleted while followed: not charged after all, or its window ended.
			return keptView{voided: true, pieces: s.pieces, bytes: s.bytes}, nil
		case errors.Is(err, ledger.ErrNotFound) && now().Before(s.waitForStart):
			// Held and running elsewhere, before its first write: wait for it.
		case err != nil:
			return keptView{}, err
		default:
			s.seen = true
			for i, c := range chunks {
				plain, err := sl.open(s.acct, s.rid, s.chunks+i, c)
				if err != nil {
					return keptView{}, fmt.Errorf("opening kept chunk %d of %s (is retention_key the same on every instance?): %w", s.chunks+i, s.rid, err)
				}
				if s.pieces, err = decodePieces(s.pieces, plain); err != nil {
					return keptView{}, err
				}
			}
			s.chunks += len(chunks)
			s.bytes = 0
			for _, p := range s.pieces {
				s.bytes += int64(len(p))
			}
			if rec.State == ledger.GenerationRunning && now().After(rec.Created.Add(s.r.genTimeout+time.Minute)) {
				rec.State = ledger.GenerationInterrupted
			}
			v := keptView{rec: rec, pieces: s.pieces[:len(s.pieces):len(s.pieces)], bytes: s.bytes}
			if len(s.pieces) > have || v.ended() {
				return v, nil
			}
		}
		t := time.NewTimer(keptPollInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return keptView{}, ctx.Err()
		}
	}
}

// find returns the kept generation rid of the account and mode, and its first view:
// ledger.ErrNotFound when there is none (never kept, another account's, or its window ended).
// A generation whose hold is open but that has not reached the ledger yet (it runs on another
// instance, in its first keptFlushInterval) is waited for.
func (r *retention) find(ctx context.Context, store handlerLedger, acct string, mode ledger.Mode, rid string) (keptSource, keptView, error) {
	if r.sealer.Load() == nil {
		return nil, keptView{}, ledger.ErrNotFound
	}
	if v, ok := liveKept.Load(liveKey{store, rid}); ok {
		k := v.(*keptText)
		if k.rec.AccountID != acct || k.rec.Mode != mode {
			return nil, keptView{}, ledger.ErrNotFound
		}
		view, err := k.next(ctx, -1)
		return k, view, err
	}
	src := &storedSource{r: r, store: store, acct: acct, rid: rid}
	view, err := src.next(ctx, -1)
	if errors.Is(err, ledger.ErrNotFound) {
		h, herr := store.GetHold(ctx, acct, rid)
		if herr != nil || h.State != ledger.HoldOpen || h.Mode != mode {
			return nil, keptView{}, err
		}
		src.waitForStart = now().Add(4 * keptFlushInterval)
		view, err = src.next(ctx, -1)
	}
	if err != nil {
		return nil, keptView{}, err
	}
	if view.rec.Mode != mode {
		return nil, keptView{}, ledger.ErrNotFound
	}
	return src, view, nil
}
