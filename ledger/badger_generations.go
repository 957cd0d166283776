package ledger

import (
	"context"
	"encoding/json"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// Kept generations of the Badger engine: a record and its chunks under prefixGeneration and
// prefixGenChunk, every key with Badger's TTL at the end of the window, so that Badger drops
// them even if no sweep runs; the sweep (at Open and every SweepInterval) deletes them by the
// ledger clock, and reads check it too. The values are what the caller gave: ciphertext.

// PutGeneration stores the record and chunks first, first+1, ... in one commit.
func (s *Badger) PutGeneration(ctx context.Context, rec GenerationRecord, first int, chunks [][]byte) error {
	if err := checkGenerationRecord(rec, first, chunks, now()); err != nil {
		return err
	}
	if len(rec.RequestID) > 255 {
		return fmt.Errorf("request id: %w", ErrInvalidArgument)
	}
	if err := s.beginWrite(); err != nil {
		return err
	}
	defer s.end()
	if _, err := s.account(rec.AccountID); err != nil {
		return err
	}
	rec.Chunks = first + len(chunks)
	rec.Created, rec.Expires = rec.Created.UTC(), rec.Expires.UTC()
	if !rec.Finished.IsZero() {
		rec.Finished = rec.Finished.UTC()
	}
	exp := uint64(rec.Expires.Unix()) + 1
	ws := make([]write, 0, 1+len(chunks))
	for i, c := range chunks {
		w := set(genChunkKey(rec.AccountID, rec.RequestID, first+i), c)
		w.expiresAt = exp
		ws = append(ws, w)
	}
	w := set(generationKey(rec.AccountID, rec.RequestID), mustJSON(rec))
	w.expiresAt = exp
	return s.c.enqueue(append(ws, w)).wait()
}

// GetGeneration returns the record and its chunks from number from on.
func (s *Badger) GetGeneration(ctx context.Context, accountID, requestID string, from int) (GenerationRecord, [][]byte, error) {
	if from < 0 {
		return GenerationRecord{}, nil, fmt.Errorf("chunk number %d: %w", from, ErrInvalidArgument)
	}
	if err := s.begin(); err != nil {
		return GenerationRecord{}, nil, err
	}
	defer s.end()
	var rec GenerationRecord
	var chunks [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		v, ok, err := getValue(txn, generationKey(accountID, requestID))
		if err != nil {
			return err
		}
		if !ok {
			return ErrNotFound
		}
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("generation %q: %w", requestID, err)
		}
		if generationExpired(rec, now()) {
			return ErrNotFound
		}
		for n := from; n < rec.Chunks; n++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			c, ok, err := getValue(txn, genChunkKey(accountID, requestID, n))
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("generation %q: chunk %d of %d is missing", requestID, n, rec.Chunks)
			}
			chunks = append(chunks, c)
		}
		return nil
	})
	if err == ErrNotFound {
		return GenerationRecord{}, nil, fmt.Errorf("generation %q of account %q: %w", requestID, accountID, ErrNotFound)
	}
	if err != nil {
		return GenerationRecord{}, nil, err
	}
	return rec, chunks, nil
}

// DeleteGeneration deletes the record and its chunks.
func (s *Badger) DeleteGeneration(ctx context.Context, accountID, requestID string) error {
	if err := s.beginChange(); err != nil {
		return err
	}
	defer s.end()
	var ws []write
	err := s.db.View(func(txn *badger.Txn) error {
		ws = generationDeletes(txn, accountID, requestID)
		return nil
	})
	if err != nil || len(ws) == 0 {
		return err
	}
	return s.c.enqueue(ws).wait()
}

// generationDeletes lists the deletes of a generation's record and every chunk it has.
func generationDeletes(txn *badger.Txn, acct, rid string) []write {
	var ws []write
	it := txn.NewIterator(badger.IteratorOptions{Prefix: genChunkPrefix(acct, rid)})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		ws = append(ws, del(it.Item().KeyCopy(nil)))
	}
	if _, err := txn.Get(generationKey(acct, rid)); err == nil || len(ws) > 0 {
		ws = append(ws, del(generationKey(acct, rid)))
	}
	return ws
}

// DeleteExpiredGenerations deletes every generation whose window has ended by the ledger clock.
func (s *Badger) DeleteExpiredGenerations(ctx context.Context) (int, error) {
	if err := s.beginChange(); err != nil {
		return 0, err
	}
	defer s.end()
	t := now()
	var ws []write
	n := 0
	err := s.db.View(func(txn *badger.Txn) error {
		var due []GenerationRecord
		err := iterate(txn, []byte{prefixGeneration}, func(k, v []byte) error {
			var rec GenerationRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("generation %x: %w", k, err)
			}
			if generationExpired(rec, t) {
				due = append(due, rec)
			}
			return ctx.Err()
		})
		if err != nil {
			return err
		}
		for _, rec := range due {
			ws = append(ws, generationDeletes(txn, rec.AccountID, rec.RequestID)...)
		}
		n = len(due)
		return nil
	})
	if err != nil || len(ws) == 0 {
		return 0, err
	}
	// In batches the committer takes whole.
	for len(ws) > 0 {
		k := min(len(ws), maxBatchOps)
		if err := s.c.enqueue(ws[:k]).wait(); err != nil {
			return 0, err
		}
		ws = ws[k:]
	}
	return n, nil
}
