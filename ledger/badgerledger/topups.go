package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// Automatic top-ups in the Badger engine: the rule of an account (prefixTopUpRule), its top-ups
// under the account (prefixTopUp, account id + top-up id) and an index from a top-up's id to its
// account (prefixTopUpID). One process owns a Badger directory, so s.topUpMu, held from the
// read until the write is durable, makes each change one step: of BeginTopUp calls racing for
// one account, the first makes the pending top-up and the others find it.

func topUpRuleKey(acct string) []byte     { return key1(prefixTopUpRule, acct) }
func topUpKey(acct, id string) []byte     { return key2(prefixTopUp, acct, id) }
func topUpIDKey(id string) []byte         { return key1(prefixTopUpID, id) }
func topUpsPrefix(acct string) []byte     { return key1(prefixTopUp, acct) }
func topUpErr(id string, err error) error { return fmt.Errorf("top-up %q: %w", id, err) }

// SaveTopUpCard stores the account's card and unpauses its rule.
func (s *Badger) SaveTopUpCard(ctx context.Context, accountID string, card ledger.TopUpCard) (ledger.TopUpRule, error) {
	if err := ledger.CheckTopUpCard(card); err != nil {
		return ledger.TopUpRule{}, err
	}
	return s.changeRule(accountID, true, func(r *ledger.TopUpRule) error {
		r.Card, r.Paused, r.PausedWhy = card, false, ""
		return nil
	})
}

// SetTopUpRule saves the account's settings.
func (s *Badger) SetTopUpRule(ctx context.Context, accountID string, st ledger.TopUpSettings) (ledger.TopUpRule, error) {
	if err := ledger.CheckTopUpSettings(st); err != nil {
		return ledger.TopUpRule{}, err
	}
	return s.changeRule(accountID, true, func(r *ledger.TopUpRule) error {
		r.TopUpSettings = st
		return nil
	})
}

// PauseTopUp pauses the account's rule.
func (s *Badger) PauseTopUp(ctx context.Context, accountID, why string) (ledger.TopUpRule, error) {
	if err := ledger.CheckString("reason", why, 512, true); err != nil {
		return ledger.TopUpRule{}, err
	}
	return s.changeRule(accountID, false, func(r *ledger.TopUpRule) error {
		r.Paused, r.PausedWhy = true, why
		return nil
	})
}

// changeRule reads the account's rule (a new one where create is set and none is saved),
// changes it with f and writes it, under topUpMu.
func (s *Badger) changeRule(accountID string, create bool, f func(*ledger.TopUpRule) error) (ledger.TopUpRule, error) {
	if err := s.beginWrite(); err != nil {
		return ledger.TopUpRule{}, err
	}
	defer s.life.End()
	a, err := s.account(accountID)
	if err != nil {
		return ledger.TopUpRule{}, err
	}
	s.unpin(a) // only that the account exists
	s.topUpMu.Lock()
	defer s.topUpMu.Unlock()
	r, ok, err := s.topUpRule(accountID)
	switch {
	case err != nil:
		return ledger.TopUpRule{}, err
	case !ok && !create:
		return ledger.TopUpRule{}, fmt.Errorf("top-up rule of %q: %w", accountID, ledger.ErrNotFound)
	case !ok:
		r = ledger.TopUpRule{AccountID: accountID}
	}
	if err := f(&r); err != nil {
		return ledger.TopUpRule{}, err
	}
	r.Updated = s.now().UTC()
	if err := s.c.enqueue([]write{set(topUpRuleKey(accountID), mustJSON(r))}).wait(); err != nil {
		return ledger.TopUpRule{}, err
	}
	return r, nil
}

// TopUpRule returns the account's rule.
func (s *Badger) TopUpRule(ctx context.Context, accountID string) (ledger.TopUpRule, error) {
	if err := s.begin(); err != nil {
		return ledger.TopUpRule{}, err
	}
	defer s.life.End()
	r, ok, err := s.topUpRule(accountID)
	if err == nil && !ok {
		err = fmt.Errorf("top-up rule of %q: %w", accountID, ledger.ErrNotFound)
	}
	return r, err
}

// ActiveTopUpRules lists the rules that may top up.
func (s *Badger) ActiveTopUpRules(ctx context.Context) ([]ledger.TopUpRule, error) {
	out := []ledger.TopUpRule{}
	err := scanJSON(ctx, s, prefixTopUpRule, "top-up rule", func(r ledger.TopUpRule) bool {
		if r.Active() {
			out = append(out, r)
		}
		return false
	})
	return out, err
}

// BeginTopUp makes a pending top-up where the rule allows one.
func (s *Badger) BeginTopUp(ctx context.Context, accountID string) (ledger.TopUp, error) {
	if err := s.beginWrite(); err != nil {
		return ledger.TopUp{}, err
	}
	defer s.life.End()
	s.topUpMu.Lock()
	defer s.topUpMu.Unlock()
	r, ok, err := s.topUpRule(accountID)
	if err != nil {
		return ledger.TopUp{}, err
	}
	if !ok {
		return ledger.TopUp{}, fmt.Errorf("top-up rule of %q: %w", accountID, ledger.ErrNotFound)
	}
	ts, err := s.accountTopUps(ctx, accountID)
	if err != nil {
		return ledger.TopUp{}, err
	}
	at := s.now().UTC()
	month := ledger.TopUpMonth(at)
	if err := ledger.CheckBeginTopUp(r, ts, month); err != nil {
		return ledger.TopUp{}, err
	}
	t := ledger.TopUp{ID: ledger.NewTopUpID(), AccountID: accountID, Month: month, Status: ledger.TopUpPending,
		Package: r.Package, Created: at, Updated: at}
	if err := s.c.enqueue([]write{set(topUpKey(accountID, t.ID), mustJSON(t)), set(topUpIDKey(t.ID), []byte(accountID))}).wait(); err != nil {
		return ledger.TopUp{}, err
	}
	return t, nil
}

// SetTopUpPaymentIntent records the top-up's payment.
func (s *Badger) SetTopUpPaymentIntent(ctx context.Context, id, paymentIntent string) (ledger.TopUp, error) {
	if err := ledger.CheckTopUpRef("payment intent", paymentIntent); err != nil {
		return ledger.TopUp{}, err
	}
	t, _, err := s.changeTopUp(id, func(t *ledger.TopUp) (bool, []write) {
		t.PaymentIntent = paymentIntent
		return true, nil
	})
	return t, err
}

// FinishTopUp moves the top-up to status, pausing the rule where it failed.
func (s *Badger) FinishTopUp(ctx context.Context, id, status, detail string) (ledger.TopUp, bool, error) {
	if err := ledger.CheckTopUpStatus(status, detail); err != nil {
		return ledger.TopUp{}, false, err
	}
	return s.changeTopUp(id, func(t *ledger.TopUp) (bool, []write) {
		if !ledger.TopUpMove(t.Status, status) {
			return false, nil
		}
		t.Status, t.Detail = status, detail
		if !ledger.TopUpPauses(status) {
			return true, nil
		}
		r, ok, err := s.topUpRule(t.AccountID)
		if err != nil || !ok {
			return true, nil // no rule to pause (it cannot go: rules are kept for good)
		}
		r.Paused, r.PausedWhy, r.Updated = true, detail, s.now().UTC()
		if r.PausedWhy == "" {
			r.PausedWhy = "the top-up " + t.ID + " " + status
		}
		return true, []write{set(topUpRuleKey(t.AccountID), mustJSON(r))}
	})
}

// changeTopUp reads the top-up of id, lets f change it (false: it did not) and writes it with
// what else f asks, under topUpMu.
func (s *Badger) changeTopUp(id string, f func(*ledger.TopUp) (bool, []write)) (ledger.TopUp, bool, error) {
	if err := ledger.CheckTopUpRef("top-up id", id); err != nil {
		return ledger.TopUp{}, false, err
	}
	// Finishing a top-up finishes work begun: it runs within the space reserve, as settling does.
	if err := s.beginChange(); err != nil {
		return ledger.TopUp{}, false, err
	}
	defer s.life.End()
	s.topUpMu.Lock()
	defer s.topUpMu.Unlock()
	t, err := s.topUp(id)
	if err != nil {
		return ledger.TopUp{}, false, err
	}
	changed, more := f(&t)
	if !changed {
		return t, false, nil
	}
	t.Updated = s.now().UTC()
	ws := append([]write{set(topUpKey(t.AccountID, id), mustJSON(t))}, more...)
	if err := s.c.enqueue(ws).wait(); err != nil {
		return ledger.TopUp{}, false, err
	}
	return t, true, nil
}

// GetTopUp returns the top-up of id.
func (s *Badger) GetTopUp(ctx context.Context, id string) (ledger.TopUp, error) {
	if err := ledger.CheckTopUpRef("top-up id", id); err != nil {
		return ledger.TopUp{}, err
	}
	if err := s.begin(); err != nil {
		return ledger.TopUp{}, err
	}
	defer s.life.End()
	return s.topUp(id)
}

// ListTopUps lists top-ups newest first.
func (s *Badger) ListTopUps(ctx context.Context, accountID string, limit int) ([]ledger.TopUp, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	var out []ledger.TopUp
	if accountID == "" {
		out = []ledger.TopUp{}
		err = scanJSON(ctx, s, prefixTopUp, "top-up", func(t ledger.TopUp) bool {
			out = append(out, t)
			return false
		})
	} else {
		if err = s.begin(); err != nil {
			return nil, err
		}
		out, err = s.accountTopUps(ctx, accountID)
		s.life.End()
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, compareTopUps)
	return out[:min(len(out), limit)], nil
}

// compareTopUps orders top-ups newest first, by id among those of one time (PostgreSQL's order).
func compareTopUps(a, b ledger.TopUp) int {
	if c := b.Created.Compare(a.Created); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// accountTopUps reads every top-up of the account (a few a month).
func (s *Badger) accountTopUps(ctx context.Context, acct string) ([]ledger.TopUp, error) {
	out := []ledger.TopUp{}
	err := s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, topUpsPrefix(acct), func(k, v []byte) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			var t ledger.TopUp
			if err := json.Unmarshal(v, &t); err != nil {
				return fmt.Errorf("top-up %q: %w", k[1:], err)
			}
			out = append(out, t)
			return nil
		})
	})
	return out, err
}

// topUpRule reads the account's rule; ok is false when there is none.
func (s *Badger) topUpRule(acct string) (r ledger.TopUpRule, ok bool, err error) {
	v, ok, err := s.get(topUpRuleKey(acct))
	if err != nil || !ok {
		return ledger.TopUpRule{}, false, err
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return ledger.TopUpRule{}, false, fmt.Errorf("top-up rule of %q: %w", acct, err)
	}
	return r, true, nil
}

// topUp reads the top-up of id, or ErrNotFound.
func (s *Badger) topUp(id string) (ledger.TopUp, error) {
	acct, ok, err := s.get(topUpIDKey(id))
	if err != nil {
		return ledger.TopUp{}, err
	}
	if !ok {
		return ledger.TopUp{}, topUpErr(id, ledger.ErrNotFound)
	}
	v, ok, err := s.get(topUpKey(string(acct), id))
	if err != nil {
		return ledger.TopUp{}, err
	}
	if !ok {
		return ledger.TopUp{}, topUpErr(id, ledger.ErrNotFound)
	}
	var t ledger.TopUp
	if err := json.Unmarshal(v, &t); err != nil {
		return ledger.TopUp{}, topUpErr(id, err)
	}
	return t, nil
}
