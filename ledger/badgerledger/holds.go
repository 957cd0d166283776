package badgerledger

import (
	"cmp"
	"context"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// Holds of the Badger engine: Hold and Reserve take one credit for a request, Settle and Void
// resolve it exactly once, and the sweep voids holds left open past their expiry.

func (s *Badger) holdResult(a *account, h *holdMem, repeated bool) ledger.HoldResult {
	bal, held := a.figures(h.rec.Mode)
	return ledger.HoldResult{RequestID: h.rec.RequestID, State: h.rec.State, Available: bal - held,
		Credits: ledger.HeldCredits(h.rec.Credits), Repeated: repeated}
}

// findHold returns the hold from memory or, once its resolution is visible in the committer's
// snapshot, from there. With inMemory (a hold of a new id, HoldRequest.NewID) only memory is
// looked in: no hold of the id can be on disk from before this process. Called with a.mu held.
func (s *Badger) findHold(a *account, rid string, inMemory bool) (*holdMem, error) {
	snap := s.c.acquire()
	defer s.c.release(snap)
	a.prune(snap)
	if h := a.holds[rid]; h != nil {
		return h, nil
	}
	if inMemory {
		return nil, ledger.ErrNotFound
	}
	rec, err := getHold(snap.txn, a.id, rid)
	if err != nil {
		return nil, err
	}
	if rec.State == ledger.HoldOpen {
		// Every open hold is read with its account, which stays cached until it is resolved.
		return nil, fmt.Errorf("hold %q of %q is open on disk but not in memory", rid, a.id)
	}
	return &holdMem{rec: rec}, nil
}

// repeated reports a hold that had been handled already, once that first handling is durable.
func (s *Badger) repeated(a *account, h *holdMem) (ledger.HoldResult, error) {
	r := s.holdResult(a, h, true)
	op := h.op
	a.mu.Unlock()
	if err := s.c.waitFor(op); err != nil {
		return ledger.HoldResult{}, err
	}
	return r, nil
}

// Hold reserves req.Credits (the request's price) of req.Mode for req.RequestID. It fails with
// ErrInsufficientCredits, writing nothing, when fewer credits are available, and with ErrAccountDisabled for a disabled
// account. A request id is held at most once: a repeated Hold reports the hold's state with
// Repeated set and changes nothing.
func (s *Badger) Hold(ctx context.Context, req ledger.HoldRequest) (ledger.HoldResult, error) {
	return s.hold(req, true)
}

// Reserve is Hold without waiting for the hold to reach the disk: it returns once the credit is
// reserved in memory and the hold's write is queued. Writes commit in queue order, so a later
// Settle or Void of the request is durable only with the hold before it; a crash before the
// hold's commit loses the hold, which charges nothing. The generate handler reserves this way
// so that a model faster than a disk sync never waits for one before its first piece of text.
// The hold's write is lazy (committer.enqueueLazy): it rides in the commit of the request's
// settle or void, or any other, and waits at most lazyDelay for one, so that a fast generation
// costs one sync, not two.
func (s *Badger) Reserve(ctx context.Context, req ledger.HoldRequest) (ledger.HoldResult, error) {
	return s.hold(req, false)
}

func (s *Badger) hold(req ledger.HoldRequest, wait bool) (ledger.HoldResult, error) {
	if err := ledger.CheckHoldRequest(req); err != nil {
		return ledger.HoldResult{}, err
	}
	if err := s.beginWrite(); err != nil {
		return ledger.HoldResult{}, err
	}
	defer s.life.End()
	a, err := s.account(req.AccountID)
	if err != nil {
		return ledger.HoldResult{}, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	h, err := s.findHold(a, req.RequestID, req.NewID)
	switch {
	case err == nil:
		return s.repeated(a, h)
	case err != ledger.ErrNotFound:
		a.mu.Unlock()
		return ledger.HoldResult{}, err
	}
	if a.rec.Load().Status == ledger.StatusDisabled {
		a.mu.Unlock()
		return ledger.HoldResult{}, ledger.ErrAccountDisabled
	}
	price := ledger.HeldCredits(req.Credits)
	t := s.now().UTC()
	if req.Mode == ledger.Live && a.lotsDue(t) {
		// Credits that expired leave before the hold counts what is available; their writes
		// commit before the hold's (queue order), whether or not it is made.
		s.c.enqueue(a.expireDue(nil, t))
	}
	bal, held := a.figures(req.Mode)
	if bal-held < price {
		a.mu.Unlock()
		return ledger.HoldResult{}, ledger.ErrInsufficientCredits
	}
	// The key's budget is counted first and stored last, so that a refusal by the member's cap
	// leaves the key's count as it was (both change only in memory, under a.mu, until the commit).
	// A key without a budget is not counted and not written.
	var charged ledger.Key
	counted := false
	ke := s.holdKeyEntry(a, req.KeyID)
	if ke != nil {
		var over *ledger.KeyBudgetError
		if charged, counted, over = s.keyCharged(ke, t, price); over != nil {
			a.mu.Unlock()
			return ledger.HoldResult{}, over
		}
	}
	mws, err := s.memberHold(a, req.KeyID, req.Mode, t, price)
	if err != nil {
		a.mu.Unlock()
		return ledger.HoldResult{}, err
	}
	var kw write
	if ke != nil {
		ke.noteUse(t) // only a request that got its hold counts as the key's use
	}
	if counted {
		kw = s.storeKeyLocked(ke, charged)
	}
	ent, ws := a.appendEntry(ledger.Entry{Kind: ledger.KindHold, Mode: req.Mode, RequestID: req.RequestID, KeyID: req.KeyID, Tool: req.Tool,
		Credits: price}, 0, price, t)
	var takes []ledger.LotTake
	if req.Mode == ledger.Live {
		takes, ws = a.takeLots(ws, price, t)
	}
	rec := holdRecord{
		AccountID: a.id,
		RequestID: req.RequestID,
		Mode:      req.Mode,
		State:     ledger.HoldOpen,
		KeyID:     req.KeyID,
		Tool:      req.Tool,
		Created:   t,
		Expires:   t.Add(cmp.Or(req.TTL, s.opts.HoldTTL)),
		HoldSeq:   ent.Seq,
		Credits:   price,
		Lots:      takes,
	}
	ws = append(append(ws, mws...),
		set(holdKey(a.id, req.RequestID), holdRecordJSON(&rec)),
		setFresh(openHoldKey(a.id, req.RequestID), nil), // a new hold: its marker was never written
	)
	if counted {
		ws = append(ws, kw)
	}
	var op *pendingOp
	if wait {
		op = s.c.enqueue(ws)
	} else {
		op = s.c.enqueueLazy(ws) // committed with the settle, or soon
	}
	a.putHold(req.RequestID, &holdMem{rec: rec, op: op.id})
	s.openHolds.Add(1)
	a.mu.Unlock()
	// A Reserve returns before the commit, except when the committer refused the write (it
	// failed earlier): then no hold will ever reach the disk, and the generation must not run.
	if !wait && op.id != 0 {
		return ledger.HoldResult{RequestID: req.RequestID, State: ledger.HoldOpen, Available: ent.AvailableAfter, Credits: price}, nil
	}
	if err := op.wait(); err != nil {
		return ledger.HoldResult{}, err
	}
	return ledger.HoldResult{RequestID: req.RequestID, State: ledger.HoldOpen, Available: ent.AvailableAfter, Credits: price}, nil
}

// Settle charges the held credits: the balance falls by the hold's price, an entry of kind settle. A hold resolved already
// (settled or voided) reports its first outcome with Repeated set.
func (s *Badger) Settle(ctx context.Context, accountID, requestID string) (ledger.HoldResult, error) {
	return s.resolve(accountID, requestID, ledger.HoldSettled, "", time.Time{})
}

// SettleDecided is Settle of a charge decided at decided (the text was delivered then): a hold
// that the sweep voided as expired after that moment is charged after all (settleLate).
func (s *Badger) SettleDecided(ctx context.Context, accountID, requestID string, decided time.Time) (ledger.HoldResult, error) {
	return s.resolve(accountID, requestID, ledger.HoldSettled, "", decided)
}

// Void releases the held credits without charging them: an entry of kind void with the reason.
// A hold resolved already reports its first outcome with Repeated set.
func (s *Badger) Void(ctx context.Context, accountID, requestID, reason string) (ledger.HoldResult, error) {
	return s.resolve(accountID, requestID, ledger.HoldVoided, reason, time.Time{})
}

// resolve settles or voids a hold. ctx is deliberately not consulted: a handler voids holds
// after its client went away, with a context that is already canceled.
func (s *Badger) resolve(accountID, requestID string, to ledger.HoldState, reason string, decided time.Time) (ledger.HoldResult, error) {
	if err := ledger.CheckResolve(requestID, reason); err != nil {
		return ledger.HoldResult{}, err
	}
	if err := s.beginChange(); err != nil {
		return ledger.HoldResult{}, err
	}
	defer s.life.End()
	a, err := s.account(accountID)
	if err != nil {
		return ledger.HoldResult{}, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	h, err := s.findHold(a, requestID, false)
	if err == ledger.ErrNotFound {
		a.mu.Unlock()
		return ledger.HoldResult{}, fmt.Errorf("hold %q of account %q: %w", requestID, accountID, ledger.ErrNotFound)
	}
	if err != nil {
		a.mu.Unlock()
		return ledger.HoldResult{}, err
	}
	if h.rec.State != ledger.HoldOpen {
		if to != ledger.HoldSettled || !ledger.LateSettleAllowed(h.rec.State, h.rec.Reason, h.rec.Expires, decided) {
			return s.repeated(a, h)
		}
		if t := s.now().UTC(); h.rec.Mode == ledger.Live && a.lotsDue(t) {
			s.c.enqueue(a.expireDue(nil, t))
		}
		if bal, held := a.figures(h.rec.Mode); bal-held < ledger.HeldCredits(h.rec.Credits) {
			return s.repeated(a, h) // the credit given back is spent: it stays voided
		}
		op := s.settleLateLocked(a, h, s.now().UTC())
		r := s.holdResult(a, h, false)
		a.mu.Unlock()
		if err := op.wait(); err != nil {
			return ledger.HoldResult{}, err
		}
		return r, nil
	}
	op := s.resolveLocked(a, h, to, reason, s.now().UTC())
	r := s.holdResult(a, h, false)
	a.mu.Unlock()
	if err := op.wait(); err != nil {
		return ledger.HoldResult{}, err
	}
	return r, nil
}

// resolveLocked settles or voids the open hold h. Called with a.mu held.
func (s *Badger) resolveLocked(a *account, h *holdMem, to ledger.HoldState, reason string, t time.Time) *pendingOp {
	m := h.rec.Mode
	price := ledger.HeldCredits(h.rec.Credits)
	amount := int64(0)
	kind := ledger.KindVoid
	if to == ledger.HoldSettled {
		amount, kind, reason = -price, ledger.KindSettle, ""
	}
	rec := h.rec
	ent, ws := a.appendEntry(ledger.Entry{Kind: kind, Mode: m, RequestID: rec.RequestID, KeyID: rec.KeyID, Tool: rec.Tool, Reason: reason,
		Credits: rec.Credits}, amount, -price, t)
	rec.State, rec.Resolved, rec.ResolveSeq, rec.Reason = to, t, ent.Seq, reason
	if len(rec.Lots) > 0 {
		ws = a.releaseLots(ws, rec.Lots, to == ledger.HoldSettled)
		if to == ledger.HoldVoided {
			ws = a.expireDue(ws, t) // what it gives back of a lot that expired leaves at once
		}
	}
	if to == ledger.HoldVoided {
		if ke := s.holdKeyEntry(a, rec.KeyID); ke != nil {
			ws = s.releaseKey(ws, ke, rec.Created, price)
		}
	}
	s.openHolds.Add(-1) // before the enqueue: this settle needs no company of its own
	op := s.c.enqueue(append(append(ws, s.memberResolve(a, &rec)...),
		set(holdKey(a.id, rec.RequestID), holdRecordJSON(&rec)),
		del(openHoldKey(a.id, rec.RequestID)),
	))
	h.rec, h.op = rec, op.id // h is the map's entry
	a.recent = append(a.recent, recentItem{kind: 'h', key: rec.RequestID, op: op.id})
	return op
}

// settleLateLocked charges hold h, voided by the sweep as expired, whose charge was decided
// before it expired: an entry of kind settle (the balance falls by its price, the open holds as they are, reason
// SettledLateReason), and the key's and the member's counts that the void gave back are taken
// again. Called with a.mu held, h voided and the credit available.
func (s *Badger) settleLateLocked(a *account, h *holdMem, t time.Time) *pendingOp {
	rec := h.rec
	price := ledger.HeldCredits(rec.Credits)
	ent, ws := a.appendEntry(ledger.Entry{Kind: ledger.KindSettle, Mode: rec.Mode, RequestID: rec.RequestID, KeyID: rec.KeyID, Tool: rec.Tool,
		Reason: ledger.SettledLateReason, Credits: rec.Credits}, -price, 0, t)
	rec.State, rec.Resolved, rec.ResolveSeq, rec.Reason = ledger.HoldSettled, t, ent.Seq, ledger.SettledLateReason
	if rec.Mode == ledger.Live && len(a.lots) > 0 {
		// The void gave back what the hold took; the late charge takes afresh and spends at once.
		rec.Lots, ws = a.takeLots(ws, price, t)
		ws = a.releaseLots(ws, rec.Lots, true)
	} else {
		rec.Lots = nil
	}
	if ke := s.holdKeyEntry(a, rec.KeyID); ke != nil {
		ws = s.retakeKey(ws, ke, rec.Created, price)
	}
	ws = append(ws, s.memberRetake(a, &rec)...)
	op := s.c.enqueue(append(ws, set(holdKey(a.id, rec.RequestID), holdRecordJSON(&rec))))
	a.putHold(rec.RequestID, &holdMem{rec: rec, op: op.id})
	a.recent = append(a.recent, recentItem{kind: 'h', key: rec.RequestID, op: op.id})
	*h = holdMem{rec: rec, op: op.id}
	return op
}

// sweep voids every open hold past its expiry and returns how many it voided.
func (s *Badger) sweep() (int, error) {
	t := s.now().UTC()
	n, err := s.voidWhere("expired", t, func(h *holdMem) bool { return !t.Before(h.rec.Expires) })
	if err != nil {
		return n, err
	}
	return n, s.expireLots(t)
}

// expireLots expires, at t, the credits of every account whose lots are due (expiry.go): it
// reads the lots' expiry order (prefixLotDue) up to t, and reads into the cache only the
// accounts with a lot due (a cached account's lots in memory decide).
func (s *Badger) expireLots(t time.Time) error {
	if err := s.beginChange(); err != nil {
		return err
	}
	defer s.life.End()
	if !s.someLots.Load() {
		return nil
	}
	var due []string
	seen := map[string]bool{}
	snap := s.c.acquire()
	it := snap.txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixLotDue}})
	var bad []byte
	for it.Rewind(); it.Valid(); it.Next() {
		acct, later, ok := lotDueAccount(it.Item().Key(), t)
		if !ok {
			bad = it.Item().KeyCopy(nil)
			break
		}
		if later {
			break
		}
		if !seen[acct] {
			seen[acct] = true
			due = append(due, acct)
		}
	}
	it.Close()
	s.c.release(snap)
	if bad != nil {
		return fmt.Errorf("malformed lot expiry key %q", bad)
	}
	var ops []*pendingOp
	for _, id := range due {
		a, err := s.account(id)
		if err != nil {
			return err
		}
		a.mu.Lock()
		if a.lotsDue(t) {
			ops = append(ops, s.c.enqueue(a.expireDue(nil, t)))
		}
		a.mu.Unlock()
		s.unpin(a)
	}
	var first error
	for _, op := range ops {
		if err := op.wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// voidLeftOver voids, at Open, every hold that is open on disk: the process that made it is
// gone (Badger's directory lock admits one process), so it can never be settled, and waiting for
// its hold_ttl would only keep the customer's credit locked. Expiry by TTL stays for stores that
// several live processes share. It reads the accounts with an open hold into the cache.
func (s *Badger) voidLeftOver() (int, error) {
	var accts []string
	err := s.forEachRecord([]byte{prefixOpenHold}, func(k, _ []byte) error {
		if len(k) < 1+ledger.AccountIDLen {
			return fmt.Errorf("malformed open-hold key %q", k)
		}
		if id := string(k[1 : 1+ledger.AccountIDLen]); len(accts) == 0 || accts[len(accts)-1] != id {
			accts = append(accts, id)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, id := range accts {
		a, err := s.account(id)
		if err != nil {
			return 0, fmt.Errorf("open hold of account %q: %w", id, err)
		}
		defer s.unpin(a)
	}
	return s.voidWhere("restart", s.now().UTC(), func(*holdMem) bool { return true })
}

// voidWhere voids, with reason, every open hold for which match is true, and returns how many.
// Every open hold is in memory: an account with one stays cached.
func (s *Badger) voidWhere(reason string, t time.Time, match func(*holdMem) bool) (int, error) {
	if err := s.beginChange(); err != nil {
		return 0, err
	}
	defer s.life.End()
	var ops []*pendingOp
	accts := s.cachedAccounts()
	defer func() {
		for _, a := range accts {
			s.unpin(a)
		}
	}()
	for _, a := range accts {
		a.mu.Lock()
		if len(a.holds) == 0 {
			a.mu.Unlock()
			continue
		}
		snap := s.c.acquire()
		a.prune(snap)
		s.c.release(snap)
		for _, h := range a.holds {
			if h.rec.State == ledger.HoldOpen && match(h) {
				ops = append(ops, s.resolveLocked(a, h, ledger.HoldVoided, reason, t))
			}
		}
		a.mu.Unlock()
	}
	var first error
	for _, op := range ops {
		if err := op.wait(); err != nil && first == nil {
			first = err
		}
	}
	return len(ops), first
}

// GetHold returns the account's hold of requestID.
func (s *Badger) GetHold(ctx context.Context, accountID, requestID string) (ledger.HoldInfo, error) {
	if err := ledger.CheckResolve(requestID, ""); err != nil {
		return ledger.HoldInfo{}, err
	}
	if err := s.begin(); err != nil {
		return ledger.HoldInfo{}, err
	}
	defer s.life.End()
	a, err := s.account(accountID)
	if err != nil {
		return ledger.HoldInfo{}, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	h, err := s.findHold(a, requestID, false)
	a.mu.Unlock()
	if err == ledger.ErrNotFound {
		return ledger.HoldInfo{}, fmt.Errorf("hold %q of account %q: %w", requestID, accountID, ledger.ErrNotFound)
	}
	if err != nil {
		return ledger.HoldInfo{}, err
	}
	r := h.rec
	return ledger.HoldInfo{AccountID: r.AccountID, RequestID: r.RequestID, Mode: r.Mode, State: r.State, KeyID: r.KeyID,
		Tool: r.Tool, Credits: ledger.HeldCredits(r.Credits), Created: r.Created, Resolved: r.Resolved, Reason: r.Reason}, nil
}
