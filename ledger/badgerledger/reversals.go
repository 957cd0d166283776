package badgerledger

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// Money that flows back in the Badger engine (ledger/reversals.go): payments (prefixPaymentIntent, with
// an index by account), and refunds and disputes (prefixReversal) by their id. Recording a
// payment and applying a reversal read records and then write them; one process owns a Badger
// directory, so s.revMu, held until the write is durable, makes each one step: of events racing
// with one id, one applies it and the others find it applied. The entry a reversal writes goes
// in the same commit as its records, so a crash keeps both or neither.

func payKey(id string) []byte           { return key1(prefixPaymentIntent, id) }
func acctPayKey(acct, id string) []byte { return key2(prefixAcctPayment, acct, id) }
func reversalKey(id string) []byte      { return key1(prefixReversal, id) }
func readJSON[T any](v []byte, what string) (T, error) {
	var out T
	if err := json.Unmarshal(v, &out); err != nil {
		return out, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// RecordPayment stores or advances a payment.
func (s *Badger) RecordPayment(ctx context.Context, p ledger.Payment) (ledger.Payment, bool, error) {
	if err := ledger.CheckPayment(p); err != nil {
		return ledger.Payment{}, false, err
	}
	if err := s.beginWrite(); err != nil {
		return ledger.Payment{}, false, err
	}
	defer s.life.End()
	s.revMu.Lock()
	defer s.revMu.Unlock()
	old, ok, err := s.payRecord(p.ID)
	if err != nil {
		return ledger.Payment{}, false, err
	}
	var prev *ledger.Payment
	if ok {
		prev = &old
	}
	rec, repeated := ledger.AdvancePayment(prev, p, s.now().UTC())
	if repeated {
		return rec, true, nil
	}
	ws := []write{set(payKey(rec.ID), mustJSON(rec)), set(key1(prefixPaymentRef, rec.Reference), []byte(rec.ID))}
	if rec.AccountID != "" {
		ws = append(ws, set(acctPayKey(rec.AccountID, rec.ID), nil))
	}
	if err := s.c.enqueue(ws).wait(); err != nil {
		return ledger.Payment{}, false, err
	}
	return rec, false, nil
}

// GetPayment returns a payment.
func (s *Badger) GetPayment(ctx context.Context, id string) (ledger.Payment, error) {
	if err := ledger.CheckString("payment id", id, ledger.MaxReferenceLen, true); err != nil {
		return ledger.Payment{}, err
	}
	if err := s.begin(); err != nil {
		return ledger.Payment{}, err
	}
	defer s.life.End()
	p, ok, err := s.payRecord(id)
	if err == nil && !ok {
		err = fmt.Errorf("payment %q: %w", id, ledger.ErrNotFound)
	}
	return p, err
}

// PaymentOf returns the payment of a purchase reference, through its index.
func (s *Badger) PaymentOf(ctx context.Context, reference string) (ledger.Payment, error) {
	if err := ledger.CheckString("reference", reference, ledger.MaxReferenceLen, true); err != nil {
		return ledger.Payment{}, err
	}
	if err := s.begin(); err != nil {
		return ledger.Payment{}, err
	}
	defer s.life.End()
	id, ok, err := s.get(key1(prefixPaymentRef, reference))
	if err == nil && ok {
		var p ledger.Payment
		if p, ok, err = s.payRecord(string(id)); ok {
			return p, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("payment of %q: %w", reference, ledger.ErrNotFound)
	}
	return ledger.Payment{}, err
}

// AccountPayments lists an account's payments, newest first.
func (s *Badger) AccountPayments(ctx context.Context, accountID string, limit int) ([]ledger.Payment, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	out := []ledger.Payment{}
	err = s.db.View(func(txn *badger.Txn) error {
		prefix := key1(prefixAcctPayment, accountID)
		return iterate(txn, prefix, func(k, _ []byte) error {
			if len(accountID) != ledger.AccountIDLen {
				return nil // another account's, whose id starts with this one
			}
			id := string(k[len(prefix):])
			v, ok, err := getValue(txn, payKey(id))
			if err != nil || !ok {
				return err
			}
			p, err := readJSON[ledger.Payment](v, "payment "+id)
			if err != nil {
				return err
			}
			out = append(out, p)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b ledger.Payment) int {
		return cmp.Or(b.Created.Compare(a.Created), strings.Compare(a.ID, b.ID))
	})
	return out[:min(len(out), limit)], nil
}

// Reverse applies one refund or dispute event, once.
func (s *Badger) Reverse(ctx context.Context, req ledger.ReversalRequest) (ledger.ReversalResult, error) {
	if err := ledger.CheckReversal(req); err != nil {
		return ledger.ReversalResult{}, err
	}
	// Taking back credits protects the operator: it runs within the space reserve, as settling
	// does.
	if err := s.beginChange(); err != nil {
		return ledger.ReversalResult{}, err
	}
	defer s.life.End()
	s.revMu.Lock()
	defer s.revMu.Unlock()
	p, ok, err := s.payRecord(req.Payment)
	if err != nil {
		return ledger.ReversalResult{}, err
	}
	if !ok {
		return ledger.ReversalResult{}, fmt.Errorf("payment %q of %s %q: %w", req.Payment, req.Kind, req.ID, ledger.ErrNotFound)
	}
	if err := ledger.CheckReversible(p, req); err != nil {
		return ledger.ReversalResult{}, err
	}
	var prev *ledger.Reversal
	if v, ok, err := s.get(reversalKey(req.ID)); err != nil {
		return ledger.ReversalResult{}, err
	} else if ok {
		r, err := readJSON[ledger.Reversal](v, "reversal "+req.ID)
		if err != nil {
			return ledger.ReversalResult{}, err
		}
		prev = &r
	}
	if err := ledger.CheckSameReversal(prev, req); err != nil {
		return ledger.ReversalResult{}, err
	}
	if p.DisputedCredits > 0 && p.DisputedCents == 0 {
		if p.DisputedCents, err = s.disputedCents(ctx, p.ID); err != nil {
			return ledger.ReversalResult{}, err
		}
	}
	st := ledger.Reverse(p, prev, req, s.now().UTC())
	res := ledger.ReversalResult{Reversal: st.Reversal, Payment: st.Payment, Repeated: st.Repeated}
	var a *account
	if p.AccountID != "" {
		if a, err = s.account(p.AccountID); err != nil && st.Entry {
			return ledger.ReversalResult{}, err
		}
		if a != nil {
			defer s.unpin(a)
		}
	}
	if st.Repeated {
		if a != nil {
			a.mu.Lock()
			res.Balance = a.balance()
			a.mu.Unlock()
		}
		return res, nil
	}
	ws := []write{set(payKey(p.ID), mustJSON(st.Payment)), set(reversalKey(req.ID), mustJSON(st.Reversal))}
	var op *pendingOp
	if st.Entry {
		a.mu.Lock()
		var lws []write
		if st.Delta < 0 && len(a.lots) > 0 {
			// What the refunded purchase gave, if still there, is what goes first.
			first, _, found, err := s.findGrant(a, p.Reference)
			if err != nil {
				a.mu.Unlock()
				return ledger.ReversalResult{}, err
			}
			if l := a.lot(first.Seq); found && l != nil {
				l.Remaining -= min(-st.Delta, l.Remaining-l.Held)
				lws = a.lotWrites(nil, first.Seq)
			}
		}
		ent, ews := a.appendEntry(st.EntryOf(), st.Delta, 0, st.Reversal.Updated)
		ews = append(ews, lws...)
		// The entry's reference is indexed like a grant's, as PostgreSQL's unique index does.
		ws = append(append(ews, set(grantRefKey(a.id, ent.Reference), seqBytes(ent.Seq))), ws...)
		op = s.c.enqueue(ws)
		a.putRef(ent.Reference, &refMem{entry: ent, op: op.id})
		a.recent = append(a.recent, recentItem{kind: 'r', key: ent.Reference, op: op.id})
		res.Entry, res.Balance = ent, a.liveBalance(s.now())
		a.mu.Unlock()
	} else {
		op = s.c.enqueue(ws)
		if a != nil {
			a.mu.Lock()
			res.Balance = a.balance()
			a.mu.Unlock()
		}
	}
	if err := op.wait(); err != nil {
		return ledger.ReversalResult{}, err
	}
	return res, nil
}

// ListReversals lists refunds and disputes, last changed first.
func (s *Badger) ListReversals(ctx context.Context, accountID string, kind ledger.ReversalKind, limit int) ([]ledger.Reversal, error) {
	limit, err := ledger.ReversalList(kind, limit)
	if err != nil {
		return nil, err
	}
	out := []ledger.Reversal{}
	err = scanJSON(ctx, s, prefixReversal, "reversal", func(r ledger.Reversal) bool {
		if (accountID == "" || r.AccountID == accountID) && (kind == "" || r.Kind == kind) {
			out = append(out, r)
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, ledger.CompareReversals)
	return out[:min(len(out), limit)], nil
}

// disputedCents counts the cents of payment id's disputes open or lost, for a payment that an
// earlier version stored without them (it kept only their credits). It reads every reversal,
// once per such payment: the payment is stored with them by the Reverse that asks.
func (s *Badger) disputedCents(ctx context.Context, id string) (int64, error) {
	var cents int64
	err := scanJSON(ctx, s, prefixReversal, "reversal", func(r ledger.Reversal) bool {
		if r.Payment == id && r.Kind == ledger.ReversalDispute && (r.Status == ledger.DisputeOpen || r.Status == ledger.DisputeLost) {
			cents += r.AmountCents
		}
		return false
	})
	return cents, err
}

// payRecord reads the payment of id; ok is false when there is none.
func (s *Badger) payRecord(id string) (ledger.Payment, bool, error) {
	v, ok, err := s.get(payKey(id))
	if err != nil || !ok {
		return ledger.Payment{}, false, err
	}
	p, err := readJSON[ledger.Payment](v, "payment "+id)
	return p, err == nil, err
}
