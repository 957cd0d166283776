package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// Alerts of the Badger engine: an account's endpoints and deliveries live under its id, and a
// pending delivery also has a due mark (prefixAlertDue), so that a claim reads the pending ones
// only, not the kept history. One process owns a Badger directory: s.alertMu makes each change
// of the alert records one step (a claim, a mark, a fan-out and its check for repeats).

func alertEndpointKey(acct, id string) []byte { return key2(prefixAlertEndpoint, acct, id) }
func alertDeliveryKey(acct, id string) []byte { return key2(prefixAlertDelivery, acct, id) }
func alertDueKey(id string) []byte            { return key1(prefixAlertDue, id) }

// CreateAlertEndpoint registers an endpoint, at most ledger.MaxAlertEndpoints per account.
func (s *Badger) CreateAlertEndpoint(ctx context.Context, e ledger.AlertEndpoint) (ledger.AlertEndpoint, error) {
	if err := ledger.CheckAlertEndpoint(&e); err != nil {
		return e, err
	}
	if err := s.beginWrite(); err != nil {
		return e, err
	}
	defer s.life.End()
	a, err := s.account(e.AccountID)
	if err != nil {
		return e, err
	}
	s.unpin(a) // only that the account exists
	s.alertMu.Lock()
	defer s.alertMu.Unlock()
	have, err := s.alertEndpoints(e.AccountID)
	if err != nil {
		return e, err
	}
	if len(have) >= ledger.MaxAlertEndpoints {
		return e, fmt.Errorf("account %s: %w", e.AccountID, ledger.ErrTooManyAlertEndpoints)
	}
	t := s.now().UTC()
	e.ID, e.Created = ledger.NewAlertEndpointID(t), t
	if err := s.c.enqueue([]write{set(alertEndpointKey(e.AccountID, e.ID), mustJSON(e))}).wait(); err != nil {
		return e, err
	}
	return e, nil
}

// alertEndpoints reads the account's endpoints in key (creation) order.
func (s *Badger) alertEndpoints(acct string) ([]ledger.AlertEndpoint, error) {
	out := []ledger.AlertEndpoint{}
	err := s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, key1(prefixAlertEndpoint, acct), func(k, v []byte) error {
			var e ledger.AlertEndpoint
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("alert endpoint %q: %w", k[1:], err)
			}
			out = append(out, e)
			return nil
		})
	})
	return out, err
}

// ListAlertEndpoints lists the account's endpoints, oldest first.
func (s *Badger) ListAlertEndpoints(ctx context.Context, accountID string) ([]ledger.AlertEndpoint, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	if accountID == "" {
		return []ledger.AlertEndpoint{}, nil
	}
	return s.alertEndpoints(accountID)
}

// DeleteAlertEndpoint deletes an endpoint and its deliveries.
func (s *Badger) DeleteAlertEndpoint(ctx context.Context, accountID, id string) error {
	if err := ledger.CheckAlertEndpointID(id); err != nil {
		return err
	}
	if err := s.beginChange(); err != nil {
		return err
	}
	defer s.life.End()
	if accountID == "" {
		return fmt.Errorf("alert endpoint %q: %w", id, ledger.ErrNotFound)
	}
	s.alertMu.Lock()
	defer s.alertMu.Unlock()
	_, ok, err := s.get(alertEndpointKey(accountID, id))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("alert endpoint %q: %w", id, ledger.ErrNotFound)
	}
	ws := []write{del(alertEndpointKey(accountID, id))}
	ds, err := s.alertDeliveries(accountID)
	if err != nil {
		return err
	}
	for _, d := range ds {
		if d.EndpointID == id {
			ws = append(ws, del(alertDeliveryKey(accountID, d.ID)), del(alertDueKey(d.ID)))
		}
	}
	return s.c.enqueue(ws).wait()
}

// alertDeliveries reads every delivery of the account, in id order.
func (s *Badger) alertDeliveries(acct string) ([]ledger.AlertDelivery, error) {
	var out []ledger.AlertDelivery
	err := s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, key1(prefixAlertDelivery, acct), func(k, v []byte) error {
			var d ledger.AlertDelivery
			if err := json.Unmarshal(v, &d); err != nil {
				return fmt.Errorf("alert delivery %q: %w", k[1:], err)
			}
			out = append(out, d)
			return nil
		})
	})
	return out, err
}

// EnqueueAlertEvent fans the event out to the subscribed endpoints, skipping those that have
// its delivery already, and drops the account's ended deliveries past ledger.AlertKeep.
func (s *Badger) EnqueueAlertEvent(ctx context.Context, ev ledger.AlertEvent) (int, error) {
	if err := ledger.CheckAlertEvent(ev); err != nil {
		return 0, err
	}
	if err := s.beginWrite(); err != nil {
		return 0, err
	}
	defer s.life.End()
	if ev.AccountID == "" {
		return 0, nil
	}
	s.alertMu.Lock()
	defer s.alertMu.Unlock()
	eps, err := s.alertEndpoints(ev.AccountID)
	if err != nil {
		return 0, err
	}
	ds, err := s.alertDeliveries(ev.AccountID)
	if err != nil {
		return 0, err
	}
	t := s.now().UTC()
	have := map[string]bool{}
	var ws []write
	for _, d := range ds {
		have[d.ID] = true
		if d.State != ledger.AlertPending && t.Sub(d.Finished) > ledger.AlertKeep {
			ws = append(ws, del(alertDeliveryKey(ev.AccountID, d.ID)))
		}
	}
	n := 0
	for _, e := range eps {
		id := ledger.AlertDeliveryID(e.ID, ev.ID)
		if !e.Wants(ev.Kind) || have[id] {
			continue
		}
		d := ledger.AlertDelivery{ID: id, AccountID: ev.AccountID, EndpointID: e.ID, EventID: ev.ID, Kind: ev.Kind,
			Payload: ev.Payload, Created: t, State: ledger.AlertPending, NextAttempt: t}
		ws = append(ws, set(alertDeliveryKey(ev.AccountID, id), mustJSON(d)), set(alertDueKey(id), []byte(ev.AccountID)))
		n++
	}
	if len(ws) == 0 {
		return 0, nil
	}
	if err := s.c.enqueue(ws).wait(); err != nil {
		return 0, err
	}
	return n, nil
}

// ClaimAlertDeliveries leases due deliveries, reading the due marks only.
func (s *Badger) ClaimAlertDeliveries(ctx context.Context, lease time.Duration, max int) ([]ledger.AlertDelivery, error) {
	if err := ledger.CheckClaim(lease, max); err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	s.alertMu.Lock()
	defer s.alertMu.Unlock()
	t := s.now().UTC()
	var due []ledger.AlertDelivery
	err := s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, []byte{prefixAlertDue}, func(k, acct []byte) error {
			v, ok, err := getValue(txn, alertDeliveryKey(string(acct), string(k[1:])))
			if err != nil || !ok {
				return err
			}
			var d ledger.AlertDelivery
			if err := json.Unmarshal(v, &d); err != nil {
				return fmt.Errorf("alert delivery %q: %w", k[1:], err)
			}
			if d.State == ledger.AlertPending && !d.NextAttempt.After(t) && !d.LeaseUntil.After(t) {
				due = append(due, d)
			}
			return nil
		})
	})
	if err != nil || len(due) == 0 {
		return nil, err
	}
	slices.SortFunc(due, func(a, b ledger.AlertDelivery) int {
		if c := a.NextAttempt.Compare(b.NextAttempt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	var out []ledger.AlertDelivery
	var ws []write
	for _, d := range due {
		if len(out) == max {
			break
		}
		v, ok, err := s.get(alertEndpointKey(d.AccountID, d.EndpointID))
		if err != nil {
			return nil, err
		}
		if !ok { // deleted with its endpoint meanwhile
			continue
		}
		var e ledger.AlertEndpoint
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, fmt.Errorf("alert endpoint %q: %w", d.EndpointID, err)
		}
		d.LeaseUntil, d.Claim = t.Add(lease), ledger.RandomBase62(22)
		d.Attempts++
		ws = append(ws, set(alertDeliveryKey(d.AccountID, d.ID), mustJSON(d)))
		d.URL, d.SealedSecret = e.URL, e.SealedSecret
		out = append(out, d)
	}
	if len(ws) == 0 {
		return nil, nil
	}
	if err := s.c.enqueue(ws).wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// MarkAlertDelivered ends a delivery as delivered.
func (s *Badger) MarkAlertDelivered(ctx context.Context, id, claim string, status int) error {
	return s.resolveAlert(id, claim, func(d *ledger.AlertDelivery, t time.Time) {
		d.State, d.LastStatus, d.LastError, d.Finished = ledger.AlertDelivered, status, "", t
	})
}

// RetryAlertDelivery makes a delivery due again later.
func (s *Badger) RetryAlertDelivery(ctx context.Context, id, claim string, at time.Time, status int, lastErr string) error {
	return s.resolveAlert(id, claim, func(d *ledger.AlertDelivery, t time.Time) {
		d.NextAttempt, d.LastStatus, d.LastError = at.UTC(), status, ledger.TruncateUTF8(lastErr, 512)
	})
}

// GiveUpAlertDelivery ends a delivery as failed.
func (s *Badger) GiveUpAlertDelivery(ctx context.Context, id, claim string, status int, lastErr string) error {
	return s.resolveAlert(id, claim, func(d *ledger.AlertDelivery, t time.Time) {
		d.State, d.LastStatus, d.LastError, d.Finished = ledger.AlertFailed, status, ledger.TruncateUTF8(lastErr, 512), t
	})
}

// resolveAlert ends the lease of claim on pending delivery id with the change f makes.
func (s *Badger) resolveAlert(id, claim string, f func(*ledger.AlertDelivery, time.Time)) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.life.End()
	s.alertMu.Lock()
	defer s.alertMu.Unlock()
	notFound := fmt.Errorf("alert delivery %q under this claim: %w", ledger.TruncateUTF8(id, 64), ledger.ErrNotFound)
	acct, ok, err := s.get(alertDueKey(id))
	if err != nil {
		return err
	}
	if !ok || claim == "" {
		return notFound
	}
	v, ok, err := s.get(alertDeliveryKey(string(acct), id))
	if err != nil {
		return err
	}
	var d ledger.AlertDelivery
	if ok {
		if err := json.Unmarshal(v, &d); err != nil {
			return fmt.Errorf("alert delivery %q: %w", id, err)
		}
	}
	if !ok || d.Claim != claim || d.State != ledger.AlertPending {
		return notFound
	}
	f(&d, s.now().UTC())
	d.LeaseUntil, d.Claim = time.Time{}, ""
	ws := []write{set(alertDeliveryKey(d.AccountID, id), mustJSON(d))}
	if d.State != ledger.AlertPending {
		ws = append(ws, del(alertDueKey(id)))
	}
	return s.c.enqueue(ws).wait()
}

// ListAlertDeliveries lists the account's deliveries, newest first.
func (s *Badger) ListAlertDeliveries(ctx context.Context, accountID string, limit int) ([]ledger.AlertDelivery, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	out := []ledger.AlertDelivery{}
	if accountID == "" {
		return out, nil
	}
	ds, err := s.alertDeliveries(accountID)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ds, ledger.AlertDeliveryOrder)
	for _, d := range ds[:min(limit, len(ds))] {
		d.Claim = ""
		out = append(out, d)
	}
	return out, nil
}

// AlertAccounts lists the accounts with an endpoint subscribed to one of kinds, reading the
// endpoints only (few: only accounts with alerts have any).
func (s *Badger) AlertAccounts(ctx context.Context, kinds []string, after string, limit int) ([]string, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	out := []string{}
	err = scanJSON(ctx, s, prefixAlertEndpoint, "alert endpoint", func(e ledger.AlertEndpoint) bool {
		if e.AccountID <= after || (len(out) > 0 && out[len(out)-1] == e.AccountID) {
			return false
		}
		for _, k := range kinds {
			if e.Wants(k) {
				out = append(out, e.AccountID)
				break
			}
		}
		return len(out) == limit
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// NoteAlert marks an occurrence as raised; Badger forgets the mark at until.
func (s *Badger) NoteAlert(ctx context.Context, accountID, key string, until time.Time) (bool, error) {
	if err := ledger.CheckAlertNote(key); err != nil {
		return false, err
	}
	if err := s.beginWrite(); err != nil {
		return false, err
	}
	defer s.life.End()
	s.alertMu.Lock()
	defer s.alertMu.Unlock()
	k := key2(prefixAlertNote, accountID, "\x00"+key)
	t := s.now()
	v, ok, err := s.get(k)
	if err != nil {
		return false, err
	}
	if ok {
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && (n == 0 || t.UnixNano() < n) {
			return false, nil
		}
	}
	w := set(k, []byte("0"))
	if !until.IsZero() {
		w = set(k, []byte(strconv.FormatInt(until.UnixNano(), 10)))
		// Badger's TTL runs on the wall clock: the mark's time left by the ledger clock, from now
		// (as tokens do); the stored until is what NoteAlert compares.
		w.expiresAt = uint64(time.Now().Add(until.Sub(t)).Unix()) + 1
		if until.Sub(t) <= 0 {
			w.expiresAt = 0
		}
	}
	if err := s.c.enqueue([]write{w}).wait(); err != nil {
		return false, err
	}
	return true, nil
}
