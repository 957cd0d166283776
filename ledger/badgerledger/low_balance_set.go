package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/caddy-textgen/textgen/ledger"
)

// The accounts with a low-balance alert, for LowBalanceChanges: a set of account ids in memory
// (about 50 bytes an id), read from the account records on disk by the first call (one pass, a
// few seconds at a million accounts) and kept up to date by SetLowBalanceAlert. It may hold an
// account whose alert was turned off since (LowBalanceChanges checks the record), never lack one
// that has an alert: an id is added once its alert is durable, and never removed while the
// store is open.

// alertedIDs returns the ids of the accounts that have (or had) an alert, sorted.
func (s *Badger) alertedIDs(ctx context.Context) ([]string, error) {
	s.lowAlertMu.Lock()
	defer s.lowAlertMu.Unlock()
	if s.lowAlerted == nil {
		set := map[string]struct{}{}
		n := 0
		err := s.forEachRecord([]byte{prefixAccount}, func(k, v []byte) error {
			if n++; n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if !hasField(v, "low_balance_alert") {
				return nil // omitted when 0
			}
			var rec ledger.Account
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("account %q: %w", k[1:], err)
			}
			if rec.LowBalanceAlert > 0 {
				set[rec.ID] = struct{}{}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		s.lowAlerted = set
	}
	ids := make([]string, 0, len(s.lowAlerted))
	for id := range s.lowAlerted {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// noteAlert adds account id to the set, once its alert is durable. Before the first
// LowBalanceChanges there is no set: its scan will read the alert from disk.
func (s *Badger) noteAlert(id string) {
	s.lowAlertMu.Lock()
	if s.lowAlerted != nil {
		s.lowAlerted[id] = struct{}{}
	}
	s.lowAlertMu.Unlock()
}
