package badgerledger

import (
	"context"
	"fmt"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// Signed receipts in the Badger engine: the signing keys under prefixReceiptKey and each charged
// generation's text digest under prefixReceiptDigest, in the ledger's own (synced) store, kept
// for good. One process owns a Badger directory, so s.rcptMu makes reading the current key and
// writing the new one one step.

func receiptKeyKey(id string) []byte           { return key1(prefixReceiptKey, id) }
func receiptDigestKey(acct, rid string) []byte { return key2(prefixReceiptDigest, acct, rid) }

// ReceiptKeys returns every signing key, oldest first.
func (s *Badger) ReceiptKeys(ctx context.Context) ([]ledger.ReceiptKey, error) {
	out := []ledger.ReceiptKey{}
	err := scanJSON(ctx, s, prefixReceiptKey, "receipt key", func(k ledger.ReceiptKey) bool {
		out = append(out, k)
		return false
	})
	if err != nil {
		return nil, err
	}
	ledger.SortReceiptKeys(out)
	return out, nil
}

// AddReceiptKey stores k as the current key: when there is none, or to rotate.
func (s *Badger) AddReceiptKey(ctx context.Context, k ledger.ReceiptKey, rotate bool) (ledger.ReceiptKey, error) {
	if err := ledger.CheckReceiptKey(k); err != nil {
		return ledger.ReceiptKey{}, err
	}
	if err := s.beginWrite(); err != nil {
		return ledger.ReceiptKey{}, err
	}
	defer s.life.End()
	s.rcptMu.Lock()
	defer s.rcptMu.Unlock()
	keys, err := s.ReceiptKeys(ctx)
	if err != nil {
		return ledger.ReceiptKey{}, err
	}
	var writes []write
	k.ValidFrom, k.ValidUntil = s.now().UTC(), time.Time{}
	for _, o := range keys {
		if o.ID == k.ID {
			return ledger.ReceiptKey{}, fmt.Errorf("receipt key %q is taken: %w", k.ID, ledger.ErrInvalidArgument)
		}
		if o.ValidUntil.IsZero() {
			if !rotate {
				return o, nil
			}
			o.ValidUntil = k.ValidFrom
			writes = append(writes, set(receiptKeyKey(o.ID), mustJSON(o)))
		}
	}
	writes = append(writes, set(receiptKeyKey(k.ID), mustJSON(k)))
	if err := s.c.enqueue(writes).wait(); err != nil {
		return ledger.ReceiptKey{}, err
	}
	return k, nil
}

// ReceiptDigest returns the digest of a generation's text.
func (s *Badger) ReceiptDigest(ctx context.Context, accountID, requestID string) ([]byte, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	v, ok, err := s.get(receiptDigestKey(accountID, requestID))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("text digest of %q: %w", requestID, ledger.ErrNotFound)
	}
	return v, nil
}

// putReceiptDigests stores the digests that puts carry in the ledger's own store, each once:
// a digest already stored stays as it is (under s.rcptMu, so no two writers race on one). A put
// with NewID is written without that read: none other can be stored (a read of a digest that is
// not there cost about 5 us of every kept generation).
func (s *Badger) putReceiptDigests(puts []ledger.GenerationPut) error {
	var w []write
	locked := false
	for _, p := range puts {
		if p.TextSHA256 == nil {
			continue
		}
		if !locked {
			locked = true
			s.rcptMu.Lock()
			defer s.rcptMu.Unlock()
		}
		k := receiptDigestKey(p.Record.AccountID, p.Record.RequestID)
		if !p.NewID {
			_, ok, err := s.get(k)
			if err != nil {
				return err
			}
			if ok {
				continue
			}
		}
		w = append(w, set(k, slices.Clone(p.TextSHA256)))
	}
	if len(w) == 0 {
		return nil
	}
	// The digests ride in the next commit (the next settle's, or lazyDelay later), not one of
	// their own: with one client at a time a commit of their own was a second disk sync a
	// generation, running beside the next request. The call still returns once they are durable,
	// and until then the receipt is read from the instance's kept text (the flusher's caller).
	return s.c.enqueueLazy(w).wait()
}

// exportReceipts gives sink the receipt keys and digests.
func exportReceipts(txn *badger.Txn, sink ledger.ExportSink, tick func()) error {
	err := iterate(txn, []byte{prefixReceiptKey}, func(k, v []byte) error {
		tick()
		rk, err := readJSON[ledger.ReceiptKey](v, fmt.Sprintf("receipt key %q", k[1:]))
		if err != nil {
			return err
		}
		return sink.ReceiptKey(rk)
	})
	if err != nil {
		return err
	}
	return iterate(txn, []byte{prefixReceiptDigest}, func(k, v []byte) error {
		tick()
		if len(k) < 1+ledger.AccountIDLen+1 {
			return fmt.Errorf("receipt digest %x: malformed key", k)
		}
		return sink.ReceiptDigest(ledger.ReceiptDigestRecord{AccountID: string(k[1 : 1+ledger.AccountIDLen]),
			RequestID: string(k[1+ledger.AccountIDLen:]), SHA256: v})
	})
}
