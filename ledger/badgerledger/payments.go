package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Unmatched payments in the Badger engine, one record per reference (prefixPayment). Recording
// and resolving read the record and then write it; one process owns a Badger directory, so
// s.payMu, held until the write is durable, makes that one step: of calls racing with one
// reference, one stores it (or resolves it) and the others see its record. Payments that
// credit nothing are rare, so a list reads them all.

func paymentKey(reference string) []byte { return key1(prefixPayment, reference) }

// RecordUnmatchedPayment stores a payment that credited nothing, once per reference.
func (s *Badger) RecordUnmatchedPayment(ctx context.Context, p ledger.UnmatchedPayment) (ledger.UnmatchedPayment, bool, error) {
	if err := ledger.CheckUnmatchedPayment(p); err != nil {
		return ledger.UnmatchedPayment{}, false, err
	}
	if err := s.beginWrite(); err != nil {
		return ledger.UnmatchedPayment{}, false, err
	}
	defer s.life.End()
	s.payMu.Lock()
	defer s.payMu.Unlock()
	first, ok, err := s.payment(p.Reference)
	if err != nil || ok {
		return first, ok, err
	}
	p.Created, p.Resolved, p.Resolution = s.now().UTC(), time.Time{}, ""
	if err := s.c.enqueue([]write{set(paymentKey(p.Reference), mustJSON(p))}).wait(); err != nil {
		return ledger.UnmatchedPayment{}, false, err
	}
	return p, false, nil
}

// UnmatchedPayments lists the payments, newest first.
func (s *Badger) UnmatchedPayments(ctx context.Context, openOnly bool, limit int) ([]ledger.UnmatchedPayment, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	out := []ledger.UnmatchedPayment{}
	err = scanJSON(ctx, s, prefixPayment, "unmatched payment", func(p ledger.UnmatchedPayment) bool {
		if !openOnly || p.Resolved.IsZero() {
			out = append(out, p)
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, comparePayments)
	return out[:min(len(out), limit)], nil
}

// comparePayments orders payments newest first, and by reference among those of one time (the
// PostgreSQL engine's order too).
func comparePayments(a, b ledger.UnmatchedPayment) int {
	if c := b.Created.Compare(a.Created); c != 0 {
		return c
	}
	return strings.Compare(a.Reference, b.Reference)
}

// ResolveUnmatchedPayment marks a payment resolved, once.
func (s *Badger) ResolveUnmatchedPayment(ctx context.Context, reference, note string) (ledger.UnmatchedPayment, bool, error) {
	if err := ledger.CheckResolvePayment(reference, note); err != nil {
		return ledger.UnmatchedPayment{}, false, err
	}
	// Resolving finishes work begun: it runs within the space reserve, as settling does.
	if err := s.beginChange(); err != nil {
		return ledger.UnmatchedPayment{}, false, err
	}
	defer s.life.End()
	s.payMu.Lock()
	defer s.payMu.Unlock()
	p, ok, err := s.payment(reference)
	switch {
	case err != nil:
		return ledger.UnmatchedPayment{}, false, err
	case !ok:
		return ledger.UnmatchedPayment{}, false, fmt.Errorf("unmatched payment %q: %w", reference, ledger.ErrNotFound)
	case !p.Resolved.IsZero():
		return p, true, nil
	}
	p.Resolved, p.Resolution = s.now().UTC(), note
	if err := s.c.enqueue([]write{set(paymentKey(reference), mustJSON(p))}).wait(); err != nil {
		return ledger.UnmatchedPayment{}, false, err
	}
	return p, false, nil
}

// payment reads the record of reference; ok is false when there is none.
func (s *Badger) payment(reference string) (p ledger.UnmatchedPayment, ok bool, err error) {
	v, ok, err := s.get(paymentKey(reference))
	if err != nil || !ok {
		return ledger.UnmatchedPayment{}, false, err
	}
	if err := json.Unmarshal(v, &p); err != nil {
		return ledger.UnmatchedPayment{}, false, fmt.Errorf("unmatched payment %q: %w", reference, err)
	}
	return p, true, nil
}
