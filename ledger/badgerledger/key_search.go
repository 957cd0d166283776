package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/caddy-textgen/textgen/ledger"
)

// FindKeys on Badger: one pass over the key records on disk, in the memory of one record and
// the matches (docs/OPERATING.md, "What the console does not do"); a key whose account is cached
// is reported as memory has it (its last use may not be written yet). A search by id decodes
// that key's record alone.
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
	n := 0
	err = s.forEachRecord([]byte{prefixKey}, func(k, v []byte) error {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if len(k) < 1+ledger.AccountIDLen {
			return fmt.Errorf("malformed key record key %q", k)
		}
		if h.ID != "" && string(k[1+ledger.AccountIDLen:]) != h.ID {
			return nil
		}
		var rec keyRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("key %q: %w", k[1:], err)
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
		if h.ID != "" || h.Matches(key) {
			out = append(out, key)
		}
		return nil
	})
	if err != nil {
		return nil, err
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
