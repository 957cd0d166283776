package badgerledger

import (
	"context"
	"slices"

	"github.com/caddy-textgen/textgen/ledger"
)

// FindKeys on Badger: a key id is looked up; the last 4 characters are matched against every
// key in memory (one pass, no disk read; docs/OPERATING.md, "What the console does not do").
func (s *Badger) FindKeys(ctx context.Context, hint string, limit int) ([]ledger.Key, error) {
	h, err := ledger.KeySearchArgs(hint, limit)
	if err != nil {
		return nil, err
	}
	if s.life.Closed.Load() {
		return nil, ledger.ErrClosed
	}
	out := []ledger.Key{}
	s.keyMu.RLock()
	if h.ID != "" {
		if e := s.keyIDs[h.ID]; e != nil {
			out = append(out, e.key())
		}
	} else {
		for _, e := range s.keyIDs {
			if k := e.rec.Load(); h.Matches(*k) {
				out = append(out, e.key())
			}
		}
	}
	s.keyMu.RUnlock()
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
