package badgerledger

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// Kept generations of the Badger engine: a record and its chunks under prefixGeneration and
// prefixGenChunk in the kept store (kept.go: a directory of their own, without synced
// writes), every key with Badger's TTL at the end of the window, so that Badger drops them even
// if no sweep runs; the sweep (at Open and every SweepInterval) deletes them by the ledger
// clock, and reads check it too. The chunks are what the caller gave: ciphertext.
//
// A generation that comes whole in one put (its first and its final one: nearly every answer
// that fits ledger.MaxGenerationPut) is one key: its record's value carries the chunks
// (wholeValue). Its own keys for each chunk would cost the store a key, a value-log entry and
// their share of every compaction more per generation. A generation written in several puts
// (a long answer, or one kept while it runs) has a key per chunk; a record's value says which.
//
// The sweep finds what is due in an index by expiry (prefixGenExpiry). The entry a generation's
// final put writes names how many chunk keys the generation has (sweepEntry), so that the sweep
// deletes it without reading its record; the entries of earlier puts are empty, and the sweep
// reads the record they name.

// PutGenerations stores the puts with one write batch of the kept store (Badger splits it
// into transactions it takes whole, committed in order).
func (s *Badger) PutGenerations(ctx context.Context, puts ...ledger.GenerationPut) error {
	if err := ledger.CheckGenerationPuts(puts, s.now()); err != nil {
		return err
	}
	for _, p := range puts {
		if len(p.Record.RequestID) > 255 {
			return fmt.Errorf("request id: %w", ledger.ErrInvalidArgument)
		}
	}
	if err := s.beginWrite(); err != nil {
		return err
	}
	defer s.life.End()
	for _, p := range puts {
		if err := s.exists(p.Record.AccountID); err != nil {
			return err
		}
	}
	// The digests first, in the ledger's synced store: they outlive the window.
	if err := s.putReceiptDigests(puts); err != nil {
		return err
	}
	db, err := s.kept.get()
	if err != nil {
		return err
	}
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	for _, p := range puts {
		if err := writeGeneration(wb, p); err != nil {
			return err
		}
	}
	return wb.Flush()
}

// writeGeneration adds one put's entries to wb, every key with Badger's TTL at the window's end.
func writeGeneration(wb *badger.WriteBatch, p ledger.GenerationPut) error {
	rec := p.Record
	rec.Chunks = p.First + len(p.Chunks)
	rec.Created, rec.Expires = rec.Created.UTC(), rec.Expires.UTC()
	if !rec.Finished.IsZero() {
		rec.Finished = rec.Finished.UTC()
	}
	exp := uint64(rec.Expires.Unix()) + 1
	set := func(k, v []byte) error {
		e := badger.NewEntry(k, v)
		e.ExpiresAt = exp
		return wb.SetEntry(e)
	}
	final := rec.State != ledger.GenerationRunning
	// Whole: no put came before it (it holds chunk 0) and none comes after.
	whole := final && p.First == 0
	// The index of the sweep: a put that moves the expiry (the final one) adds a key; the sweep
	// deletes the record at the first that is due and the others as it meets them.
	var entry []byte
	if final {
		entry = sweepEntry(whole, rec.Chunks)
	}
	if err := set(genExpiryKey(rec.Expires.Unix(), rec.AccountID, rec.RequestID), entry); err != nil {
		return err
	}
	if whole {
		return set(generationKey(rec.AccountID, rec.RequestID), wholeValue(&rec, p.Chunks))
	}
	for i, c := range p.Chunks {
		if err := set(genChunkKey(rec.AccountID, rec.RequestID, p.First+i), c); err != nil {
			return err
		}
	}
	return set(generationKey(rec.AccountID, rec.RequestID), generationJSON(&rec))
}

// wholeMark starts the value of a generation kept whole, where a record alone starts with '{',
// and the sweep's index entry of a generation's final put.
const wholeMark byte = 0x01

// wholeValue is the value of a generation kept whole: wholeMark, the number of chunks, each
// chunk after its length (uvarints), and the record's JSON to the end.
func wholeValue(rec *ledger.GenerationRecord, chunks [][]byte) []byte {
	n := 1 + binary.MaxVarintLen32 + generationJSONSize(rec)
	for _, c := range chunks {
		n += binary.MaxVarintLen32 + len(c)
	}
	v := binary.AppendUvarint(append(make([]byte, 0, n), wholeMark), uint64(len(chunks)))
	for _, c := range chunks {
		v = append(binary.AppendUvarint(v, uint64(len(c))), c...)
	}
	return appendGeneration(v, rec)
}

// sweepEntry is the sweep's index entry of a generation's final put: wholeMark and the number
// of its chunk keys (none when it was kept whole).
func sweepEntry(whole bool, chunks int) []byte {
	if whole {
		chunks = 0
	}
	return binary.AppendUvarint([]byte{wholeMark}, uint64(chunks))
}

// parseSweepEntry reads an index entry's value: ok when it is a final put's, with the number of
// the generation's chunk keys.
func parseSweepEntry(v []byte) (chunkKeys int, ok bool) {
	if len(v) < 2 || v[0] != wholeMark {
		return 0, false
	}
	n, k := binary.Uvarint(v[1:])
	if k != len(v)-1 || n > 1<<31 {
		return 0, false
	}
	return int(n), true
}

// parseGenerationValue reads a record's value: the record, and its chunks if it was kept
// whole (inline; nil otherwise: they have keys of their own). The chunks are slices of v.
func parseGenerationValue(v []byte) (rec ledger.GenerationRecord, inline [][]byte, whole bool, err error) {
	if len(v) > 0 && v[0] == wholeMark {
		rest := v[1:]
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)) {
			return rec, nil, false, errors.New("a whole generation's value is cut short")
		}
		rest = rest[k:]
		inline = make([][]byte, 0, n)
		for range n {
			l, k := binary.Uvarint(rest)
			if k <= 0 || l > uint64(len(rest)-k) {
				return rec, nil, false, errors.New("a whole generation's value is cut short")
			}
			inline, rest = append(inline, rest[k:k+int(l):k+int(l)]), rest[k+int(l):]
		}
		v, whole = rest, true
	}
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, nil, false, err
	}
	if whole && rec.Chunks != len(inline) {
		return rec, nil, false, fmt.Errorf("a whole generation's value holds %d chunks of %d", len(inline), rec.Chunks)
	}
	return rec, inline, whole, nil
}

// GetGeneration returns the record and its chunks from number from on.
func (s *Badger) GetGeneration(ctx context.Context, accountID, requestID string, from int) (ledger.GenerationRecord, [][]byte, error) {
	if from < 0 {
		return ledger.GenerationRecord{}, nil, fmt.Errorf("chunk number %d: %w", from, ledger.ErrInvalidArgument)
	}
	if err := s.begin(); err != nil {
		return ledger.GenerationRecord{}, nil, err
	}
	defer s.life.End()
	notFound := fmt.Errorf("generation %q of account %q: %w", requestID, accountID, ledger.ErrNotFound)
	db := s.kept.opened()
	if db == nil && s.space.err() == nil {
		db, _ = s.kept.get() // kept text from before a restart is in its directory
	}
	if db == nil {
		return ledger.GenerationRecord{}, nil, notFound
	}
	var rec ledger.GenerationRecord
	var chunks [][]byte
	err := db.View(func(txn *badger.Txn) error {
		v, ok, err := getValue(txn, generationKey(accountID, requestID))
		if err != nil {
			return err
		}
		if !ok {
			return ledger.ErrNotFound
		}
		var inline [][]byte
		var whole bool
		if rec, inline, whole, err = parseGenerationValue(v); err != nil {
			return fmt.Errorf("generation %q: %w", requestID, err)
		}
		if ledger.GenerationExpired(rec, s.now()) {
			return ledger.ErrNotFound
		}
		if whole {
			if from < len(inline) {
				chunks = inline[from:]
			}
			return nil
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
	if err == ledger.ErrNotFound {
		return ledger.GenerationRecord{}, nil, notFound
	}
	if err != nil {
		return ledger.GenerationRecord{}, nil, err
	}
	return rec, chunks, nil
}

// DeleteGeneration deletes the record and its chunks.
func (s *Badger) DeleteGeneration(ctx context.Context, accountID, requestID string) error {
	if err := s.beginChange(); err != nil {
		return err
	}
	defer s.life.End()
	db := s.kept.opened()
	if db == nil {
		return nil // nothing was written since the store opened; older text is the sweep's
	}
	var keys [][]byte
	if err := db.View(func(txn *badger.Txn) error {
		keys = chunkKeys(txn, accountID, requestID)
		v, ok, err := getValue(txn, generationKey(accountID, requestID))
		if err != nil || (!ok && len(keys) == 0) {
			return err
		}
		keys = append(keys, generationKey(accountID, requestID))
		// A final put's index entry goes with it: the sweep counts a generation by that
		// entry alone.
		if rec, _, _, err := parseGenerationValue(v); err == nil && ok && rec.State != ledger.GenerationRunning {
			keys = append(keys, genExpiryKey(rec.Expires.Unix(), accountID, requestID))
		}
		return nil
	}); err != nil {
		return err
	}
	return deleteKeys(db, keys)
}

// chunkKeys lists the keys of every chunk of a generation that has keys of its own.
func chunkKeys(txn *badger.Txn, acct, rid string) [][]byte {
	var keys [][]byte
	it := txn.NewIterator(badger.IteratorOptions{Prefix: genChunkPrefix(acct, rid)})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		keys = append(keys, it.Item().KeyCopy(nil))
	}
	return keys
}

// deleteKeys deletes keys from the kept store in transactions Badger takes whole.
func deleteKeys(db *badger.DB, keys [][]byte) error {
	for len(keys) > 0 {
		k := min(len(keys), maxBatchOps)
		if err := db.Update(func(txn *badger.Txn) error {
			for _, key := range keys[:k] {
				if err := txn.Delete(key); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		keys = keys[k:]
	}
	return nil
}

// DeleteExpiredGenerations deletes every generation whose window has ended by the ledger clock.
// It reads the expiry index up to now, not every record.
func (s *Badger) DeleteExpiredGenerations(ctx context.Context) (int, error) {
	if err := s.beginChange(); err != nil {
		return 0, err
	}
	defer s.life.End()
	db, err := s.kept.get()
	if err != nil {
		return 0, err
	}
	t := s.now()
	var keys [][]byte
	n := 0
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixGenExpiry}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			item := it.Item()
			k := item.KeyCopy(nil)
			exp, acct, rid, ok := parseGenExpiryKey(k)
			if ok && exp > t.Unix() {
				break // the index is in expiry order: the rest is not due
			}
			keys = append(keys, k)
			if !ok {
				continue
			}
			if exp < t.Unix() {
				var chunks int
				final := false
				_ = item.Value(func(v []byte) error { // inline: a few bytes at most
					chunks, final = parseSweepEntry(v)
					return nil
				})
				if final {
					// A final put's: the window ended before this second began, and the entry
					// names every key (DeleteGeneration deletes the entry with them).
					keys = append(keys, generationKey(acct, rid))
					for c := range chunks {
						keys = append(keys, genChunkKey(acct, rid, c))
					}
					n++
					continue
				}
			}
			v, found, err := getValue(txn, generationKey(acct, rid))
			if err != nil {
				return err
			}
			var rec ledger.GenerationRecord
			if found {
				if rec, _, _, err = parseGenerationValue(v); err != nil {
					return fmt.Errorf("generation %q: %w", rid, err)
				}
			}
			switch {
			case !found || exp != rec.Expires.Unix():
				// The entry of a record gone, or of an expiry a later put moved: the record
				// has an entry of its own (written before it), which deletes and counts it.
			case ledger.GenerationExpired(rec, t):
				keys = append(append(keys, chunkKeys(txn, acct, rid)...), generationKey(acct, rid))
				n++
			default:
				// Its own entry, due later within this second: the next sweep's.
				keys = keys[:len(keys)-1]
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := deleteKeys(db, keys); err != nil {
		return 0, err
	}
	return n, nil
}
