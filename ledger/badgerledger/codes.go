package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// Redemption codes in the Badger engine. A code is one record (prefixCode) found by its
// digest (prefixCodeHash); each redemption is a record under the code and the account
// (prefixCodeRedeem). s.codeMu, held until a change of a code is durable, makes each redemption
// one step: read the code and the account's redemption, then write the new use count, the
// redemption, and (under the account's mutex, in the same commit) the grant entry. One process
// holds the directory, so that lock is every redemption there is.

// codeRecord is the stored form of a code: its digest, never the code.
type codeRecord struct {
	ledger.RedemptionCode
	Digest [32]byte `json:"digest"`
}

func codeKey(id string) []byte             { return key1(prefixCode, id) }
func codeHashKey(d [32]byte) []byte        { return append([]byte{prefixCodeHash}, d[:]...) }
func codeRedeemKey(id, acct string) []byte { return key2(prefixCodeRedeem, id, acct) }

// CreateCode stores a new code and returns it in full, once.
func (s *Badger) CreateCode(ctx context.Context, n ledger.NewCode) (string, ledger.RedemptionCode, error) {
	n, err := ledger.CheckNewCode(n, s.now())
	if err != nil {
		return "", ledger.RedemptionCode{}, err
	}
	if err := s.beginWrite(); err != nil {
		return "", ledger.RedemptionCode{}, err
	}
	defer s.life.End()
	code := ledger.MakeCode()
	norm, _ := ledger.NormalizeCode(code)
	rec := codeRecord{RedemptionCode: ledger.RedemptionCode{ID: ledger.NewCodeID(), Last4: ledger.CodeLast4(norm),
		Credits: n.Credits, MaxUses: n.MaxUses, Expires: n.Expires, Note: n.Note, Created: s.now().UTC()},
		Digest: ledger.CodeDigest(norm)}
	s.codeMu.Lock()
	defer s.codeMu.Unlock()
	err = s.c.enqueue([]write{set(codeKey(rec.ID), mustJSON(rec)), set(codeHashKey(rec.Digest), []byte(rec.ID))}).wait()
	if err != nil {
		return "", ledger.RedemptionCode{}, err
	}
	return code, rec.RedemptionCode, nil
}

// readCode reads a code's record in txn; ok is false when there is none.
func readCode(txn *badger.Txn, id string) (codeRecord, bool, error) {
	var rec codeRecord
	v, ok, err := getValue(txn, codeKey(id))
	if err != nil || !ok {
		return rec, false, err
	}
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, false, fmt.Errorf("code %q: %w", id, err)
	}
	return rec, true, nil
}

// ListCodes lists codes newest first.
func (s *Badger) ListCodes(ctx context.Context, limit int) ([]ledger.RedemptionCode, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	out := []ledger.RedemptionCode{}
	err = scanJSON(ctx, s, prefixCode, "code", func(r codeRecord) bool {
		out = append(out, r.RedemptionCode)
		return false
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// GetCode returns the code with id.
func (s *Badger) GetCode(ctx context.Context, id string) (ledger.RedemptionCode, error) {
	if err := ledger.CheckCodeID(id); err != nil {
		return ledger.RedemptionCode{}, err
	}
	if err := s.begin(); err != nil {
		return ledger.RedemptionCode{}, err
	}
	defer s.life.End()
	var rec codeRecord
	err := s.db.View(func(txn *badger.Txn) error {
		r, ok, err := readCode(txn, id)
		if err == nil && !ok {
			err = fmt.Errorf("code %q: %w", id, ledger.ErrNotFound)
		}
		rec = r
		return err
	})
	return rec.RedemptionCode, err
}

// DisableCode stops the code; a disabled one is returned as it is.
func (s *Badger) DisableCode(ctx context.Context, id string) (ledger.RedemptionCode, error) {
	if err := ledger.CheckCodeID(id); err != nil {
		return ledger.RedemptionCode{}, err
	}
	if err := s.beginChange(); err != nil {
		return ledger.RedemptionCode{}, err
	}
	defer s.life.End()
	s.codeMu.Lock()
	defer s.codeMu.Unlock()
	var rec codeRecord
	err := s.db.View(func(txn *badger.Txn) error {
		r, ok, err := readCode(txn, id)
		if err == nil && !ok {
			err = fmt.Errorf("code %q: %w", id, ledger.ErrNotFound)
		}
		rec = r
		return err
	})
	if err != nil || !rec.Disabled.IsZero() {
		return rec.RedemptionCode, err
	}
	rec.Disabled = s.now().UTC()
	if err := s.c.enqueue([]write{set(codeKey(id), mustJSON(rec))}).wait(); err != nil {
		return ledger.RedemptionCode{}, err
	}
	return rec.RedemptionCode, nil
}

// CodeRedemptions lists who redeemed the code, newest first.
func (s *Badger) CodeRedemptions(ctx context.Context, id string, limit int) ([]ledger.CodeRedemption, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	if _, err := s.GetCode(ctx, id); err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	out := []ledger.CodeRedemption{}
	err = s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, key1(prefixCodeRedeem, id), func(k, v []byte) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			var r ledger.CodeRedemption
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("redemption %q: %w", k[1:], err)
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Email = s.accountEmail(out[i].AccountID)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Time.Equal(out[j].Time) {
			return out[i].Time.After(out[j].Time)
		}
		return out[i].AccountID < out[j].AccountID
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Redeem credits the account with the code's credits, once per account and at most MaxUses
// times in all.
func (s *Badger) Redeem(ctx context.Context, accountID, code string) (ledger.Redemption, error) {
	norm, ok := ledger.NormalizeCode(code)
	if !ok {
		return ledger.Redemption{}, ledger.ErrCodeUnknown
	}
	if err := s.beginWrite(); err != nil {
		return ledger.Redemption{}, err
	}
	defer s.life.End()
	a, err := s.account(accountID)
	if err != nil {
		return ledger.Redemption{}, err
	}
	defer s.unpin(a)
	if a.rec.Load().Status == ledger.StatusDisabled {
		return ledger.Redemption{}, ledger.ErrAccountDisabled
	}
	s.codeMu.Lock()
	defer s.codeMu.Unlock()
	// Every change of a code is durable before codeMu is released, so Badger itself has the
	// code's current record.
	var rec codeRecord
	var redeemed bool
	err = s.db.View(func(txn *badger.Txn) error {
		id, ok, err := getValue(txn, codeHashKey(ledger.CodeDigest(norm)))
		if err != nil {
			return err
		}
		if !ok {
			return ledger.ErrCodeUnknown
		}
		r, ok, err := readCode(txn, string(id))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("code digest points at a missing code %q", id)
		}
		rec = r
		_, redeemed, err = getValue(txn, codeRedeemKey(rec.ID, accountID))
		return err
	})
	if err != nil {
		return ledger.Redemption{}, err
	}
	// An account that redeemed the code learns that first, whatever became of the code since.
	if redeemed {
		return ledger.Redemption{}, ledger.ErrAlreadyRedeemed
	}
	t := s.now().UTC()
	if err := rec.Redeemable(t); err != nil {
		return ledger.Redemption{}, err
	}
	ref := ledger.CodeReference(rec.ID)
	a.mu.Lock()
	// The grant reference is the account's own guard against a second credit.
	if _, _, found, err := s.findGrant(a, ref); err != nil || found {
		a.mu.Unlock()
		if err != nil {
			return ledger.Redemption{}, err
		}
		return ledger.Redemption{}, ledger.ErrAlreadyRedeemed
	}
	ent, ws := a.appendEntry(ledger.Entry{Kind: ledger.KindGrant, Mode: ledger.Live, Reference: ref,
		Reason: ledger.RedeemReason}, rec.Credits, 0, t)
	rec.Uses++
	ws = append(ws, set(grantRefKey(a.id, ref), seqBytes(ent.Seq)), set(codeKey(rec.ID), mustJSON(rec)),
		set(codeRedeemKey(rec.ID, a.id), mustJSON(ledger.CodeRedemption{CodeID: rec.ID, AccountID: a.id,
			Credits: rec.Credits, Seq: ent.Seq, Time: t})))
	op := s.c.enqueue(ws)
	a.putRef(ref, &refMem{entry: ent, op: op.id})
	a.recent = append(a.recent, recentItem{kind: 'r', key: ref, op: op.id})
	b := a.balance()
	a.mu.Unlock()
	if err := op.wait(); err != nil {
		return ledger.Redemption{}, err
	}
	return ledger.Redemption{Code: rec.RedemptionCode, Entry: ent, Balance: b}, nil
}
