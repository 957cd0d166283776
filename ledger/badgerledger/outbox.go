package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// The e-mail outbox of the Badger engine. One process owns a Badger directory, so s.mailMu
// makes a claim one step: no two senders of the process lease the same message. Messages are
// deleted once sent or dropped; the queue is small, so a claim reads all of it.

// outboxRecord is the stored form of a queued message (prefixOutbox): the message with its
// lease (MailMessage.LeaseUntil) and claim.
type outboxRecord struct {
	ledger.MailMessage
}

func outboxKey(id string) []byte { return key1(prefixOutbox, id) }

// EnqueueMail stores a message for the senders.
func (s *Badger) EnqueueMail(ctx context.Context, m ledger.MailMessage) (string, error) {
	if err := ledger.CheckMail(m); err != nil {
		return "", err
	}
	if err := s.beginWrite(); err != nil {
		return "", err
	}
	defer s.life.End()
	t := s.now().UTC()
	m.ID, m.Created, m.Attempts, m.Claim = ledger.NewMailID(t), t, 0, ""
	if m.NextAttempt.IsZero() {
		m.NextAttempt = t
	}
	if err := s.c.enqueue([]write{set(outboxKey(m.ID), mustJSON(outboxRecord{MailMessage: m}))}).wait(); err != nil {
		return "", err
	}
	return m.ID, nil
}

// ClaimMail leases due messages.
func (s *Badger) ClaimMail(ctx context.Context, lease time.Duration, max int) ([]ledger.MailMessage, error) {
	if err := ledger.CheckClaim(lease, max); err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	s.mailMu.Lock()
	defer s.mailMu.Unlock()
	t := s.now().UTC()
	var due []outboxRecord
	err := s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, []byte{prefixOutbox}, func(k, v []byte) error {
			var r outboxRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("outbox record %q: %w", k[1:], err)
			}
			if !r.NextAttempt.After(t) && !r.LeaseUntil.After(t) && len(due) < max {
				due = append(due, r)
			}
			return nil
		})
	})
	if err != nil || len(due) == 0 {
		return nil, err
	}
	out := make([]ledger.MailMessage, len(due))
	ws := make([]write, len(due))
	for i := range due {
		due[i].LeaseUntil, due[i].Claim = t.Add(lease), ledger.RandomBase62(22)
		due[i].Attempts++
		ws[i] = set(outboxKey(due[i].ID), mustJSON(due[i]))
		out[i] = due[i].MailMessage
	}
	if err := s.c.enqueue(ws).wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// MarkMailSent deletes a sent message.
func (s *Badger) MarkMailSent(ctx context.Context, id, claim string) error {
	return s.resolveMail(id, claim, func(outboxRecord) write { return del(outboxKey(id)) })
}

// RetryMail makes a message due again later.
func (s *Badger) RetryMail(ctx context.Context, id, claim string, at time.Time, lastErr string) error {
	return s.resolveMail(id, claim, func(r outboxRecord) write {
		r.NextAttempt, r.LeaseUntil, r.Claim, r.LastError = at.UTC(), time.Time{}, "", ledger.TruncateUTF8(lastErr, 512)
		return set(outboxKey(id), mustJSON(r))
	})
}

// resolveMail ends the lease of claim on message id with the write f makes of it.
func (s *Badger) resolveMail(id, claim string, f func(outboxRecord) write) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.life.End()
	s.mailMu.Lock()
	defer s.mailMu.Unlock()
	v, ok, err := s.get(outboxKey(id))
	if err != nil {
		return err
	}
	var r outboxRecord
	if ok {
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("outbox record %q: %w", id, err)
		}
	}
	if !ok || claim == "" || r.Claim != claim {
		return fmt.Errorf("mail %q under this claim: %w", id, ledger.ErrNotFound)
	}
	return s.c.enqueue([]write{f(r)}).wait()
}

// ListMail lists the queued messages, oldest first. A message's key is its id, which begins
// with its creation time in fixed-width hex (NewMailID), so key order is the order wanted and
// the listing stops after limit messages.
func (s *Badger) ListMail(ctx context.Context, limit int) ([]ledger.MailMessage, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	out := []ledger.MailMessage{}
	err = scanJSON(ctx, s, prefixOutbox, "outbox record", func(r outboxRecord) bool {
		r.Sealed, r.Claim = nil, ""
		out = append(out, r.MailMessage)
		return len(out) == limit
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DropMail deletes a queued message, leased or not. Under s.mailMu, so that a sender's
// MarkMailSent or RetryMail runs wholly before it (and the drop deletes what they wrote) or
// wholly after it (and finds nothing: ErrNotFound).
func (s *Badger) DropMail(ctx context.Context, id string) error {
	if err := ledger.CheckMailID(id); err != nil {
		return err
	}
	// Dropping frees space: it runs within the space reserve, as marking a message sent does.
	if err := s.beginChange(); err != nil {
		return err
	}
	defer s.life.End()
	s.mailMu.Lock()
	defer s.mailMu.Unlock()
	_, ok, err := s.get(outboxKey(id))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("mail %q: %w", id, ledger.ErrNotFound)
	}
	return s.c.enqueue([]write{del(outboxKey(id))}).wait()
}
