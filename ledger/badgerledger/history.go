package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// History returns the account's entries newest first. NextCursor is "" on the last page.
// It shows durable entries only, so a change is listed once its call has returned.
func (s *Badger) History(ctx context.Context, accountID string, p ledger.Page) ([]ledger.Entry, string, error) {
	limit, before, err := ledger.HistoryPage(p) // list entries with seq < before; 0 = from the newest
	if err != nil {
		return nil, "", err
	}
	if err := s.begin(); err != nil {
		return nil, "", err
	}
	defer s.life.End()
	if err := s.exists(accountID); err != nil {
		return nil, "", err
	}
	out := []ledger.Entry{}
	more := false
	err = s.db.View(func(txn *badger.Txn) error {
		prefix := entryPrefix(accountID)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true, PrefetchValues: true, PrefetchSize: min(limit+1, 100)})
		defer it.Close()
		if before == 0 {
			it.Seek(entryKey(accountID, ^uint64(0)))
		} else {
			it.Seek(entryKey(accountID, before-1))
		}
		for ; it.Valid(); it.Next() {
			if len(out) == limit {
				more = true
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			var e ledger.Entry
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &e) }); err != nil {
				return fmt.Errorf("entry %x: %w", it.Item().Key(), err)
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if more {
		next = ledger.HistoryCursor(out[len(out)-1].Seq)
	}
	return out, next, nil
}

// usageClockSlack is how far back in time an account's entry may be written after a later one
// (a clock stepped back) and still be counted by Usage from a time on.
const usageClockSlack = time.Hour

// Usage counts holds, settles and voids per UTC day, tool and mode, for one account or all,
// with entry times in [From, To). It scans the entries it covers.
func (s *Badger) Usage(ctx context.Context, q ledger.UsageQuery) ([]ledger.UsageRow, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	if q.AccountID != "" {
		if err := s.exists(q.AccountID); err != nil {
			return nil, err
		}
	}
	type rowKey struct {
		day, tool, key string
		mode           ledger.Mode
	}
	rows := map[rowKey]*ledger.UsageRow{}
	n := 0
	// One account's entries are in time order (their seq and time are taken together under
	// the account's lock), so a summary from q.From reads them newest first and stops at the
	// first entry older than From by more than usageClockSlack: My Account's 30 days cost those
	// days, not the account's whole history.
	reverse := q.AccountID != "" && !q.From.IsZero()
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: entryPrefix(q.AccountID), Reverse: reverse, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		if reverse {
			it.Seek(entryKey(q.AccountID, ^uint64(0)))
		} else {
			it.Rewind()
		}
		for ; it.Valid(); it.Next() {
			if n++; n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			var e ledger.Entry
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &e) }); err != nil {
				return fmt.Errorf("entry %x: %w", it.Item().Key(), err)
			}
			if reverse && e.Time.Before(q.From.Add(-usageClockSlack)) {
				return nil
			}
			if e.Kind != ledger.KindHold && e.Kind != ledger.KindSettle && e.Kind != ledger.KindVoid {
				continue
			}
			if (!q.From.IsZero() && e.Time.Before(q.From)) || (!q.To.IsZero() && !e.Time.Before(q.To)) {
				continue
			}
			rk := rowKey{day: e.Time.UTC().Format("2006-01-02"), tool: e.Tool, mode: e.Mode}
			if q.ByKey {
				rk.key = e.KeyID
			}
			r := rows[rk]
			if r == nil {
				r = &ledger.UsageRow{Day: rk.day, Tool: rk.tool, Mode: rk.mode, KeyID: rk.key}
				rows[rk] = r
			}
			switch e.Kind {
			case ledger.KindHold:
				r.Requests++
			case ledger.KindSettle:
				r.Settled++
				r.Credits -= e.Amount
			case ledger.KindVoid:
				r.Voided++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]ledger.UsageRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Day != b.Day {
			return a.Day < b.Day
		}
		if a.Tool != b.Tool {
			return a.Tool < b.Tool
		}
		if a.Mode != b.Mode {
			return a.Mode < b.Mode
		}
		return a.KeyID < b.KeyID
	})
	return out, nil
}
