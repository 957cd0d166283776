package badgerledger

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// FindKeys on Badger: one pass over the key records on disk, in the memory of one record and
// the matches (docs/OPERATING.md, "What the console does not do"); a key whose account is cached
// is reported as memory has it (its last use may not be written yet). Only the records that can
// match are decoded: a search by id reads no value but that key's.
func (s *Badger) FindKeys(ctx context.Context, hint string, limit int) ([]ledger.Key, error) {
	h, err := ledger.KeySearchArgs(hint, limit)
	if err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	out := []ledger.Key{}
	// A record is decoded only when it can match: its id (in the record's Badger key), or its
	// last 4 characters as its JSON has them.
	last4 := []byte(`"last4":"` + h.Last4 + `"`)
	n := 0
	snap := s.c.acquire()
	defer s.c.release(snap)
	it := snap.txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixKey}})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		item := it.Item()
		k := item.Key()
		if len(k) < 1+ledger.AccountIDLen {
			return nil, fmt.Errorf("malformed key record key %q", k)
		}
		if h.ID != "" && string(k[1+ledger.AccountIDLen:]) != h.ID {
			continue
		}
		var key ledger.Key
		var ok bool
		err := item.Value(func(v []byte) error {
			if h.ID == "" && !bytes.Contains(v, last4) {
				return nil
			}
			var err error
			key, err = s.foundKey(k, v)
			ok = err == nil && h.Matches(key)
			return err
		})
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, key)
		}
	}
	slices.SortFunc(out, func(x, y ledger.Key) int {
		if c := y.Created.Compare(x.Created); c != 0 {
			return c
		}
		return compareStrings(y.ID, x.ID)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// foundKey is the key of record k, v: as memory has it when its account is cached (its last use
// may not be written yet), else as stored.
func (s *Badger) foundKey(k, v []byte) (ledger.Key, error) {
	var rec keyRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return ledger.Key{}, fmt.Errorf("key %q: %w", k[1:], err)
	}
	key := rec.Key
	if a := s.pinCached(rec.AccountID); a != nil {
		a.mu.Lock()
		if e := a.key(rec.ID); e != nil {
			key = e.key()
		}
		a.mu.Unlock()
		s.unpin(a)
	}
	return key, nil
}
