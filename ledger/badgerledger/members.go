package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// Organisations in the Badger engine (ledger/members.go). An organisation's members and their monthly
// counts live in memory with the account (orgState, read with it into the cache), so the hold
// path reads no disk; a change of
// members is made under the organisation's orgMu, written, and applied to memory once durable.

// memberRecord is the stored form of a membership (prefixMember).
type memberRecord struct {
	Role       ledger.Role `json:"role"`
	MonthlyCap int64       `json:"monthly_cap,omitempty"`
	Pending    bool        `json:"pending,omitempty"`
	Created    time.Time   `json:"created"`
}

type usageKey struct{ member, month string }

// orgState is an organisation in memory.
type orgState struct {
	members map[string]memberRecord
	used    map[usageKey]int64
}

func newOrgState() *orgState {
	return &orgState{members: map[string]memberRecord{}, used: map[usageKey]int64{}}
}

func memberKey(org, member string) []byte   { return key2(prefixMember, org, member) }
func memberOfKey(member, org string) []byte { return key2(prefixMemberOf, member, org) }

func memberUsageKey(org, member, month string) []byte {
	return append(key2(prefixMemberUsage, org, member), month...)
}

// readMembers reads organisation a's members and months, if it is one (readAccount).
// each calls f with every record of a.id under a prefix.
func (s *Badger) readMembers(each func(prefix byte, f func(k, v []byte) error) error, a *account) error {
	err := each(prefixMember, func(k, v []byte) error {
		if len(k) != 1+2*ledger.AccountIDLen {
			return fmt.Errorf("malformed membership key %q", k)
		}
		member := string(k[1+ledger.AccountIDLen:])
		var rec memberRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("membership %q of %q: %w", member, a.id, err)
		}
		if a.org == nil {
			a.org = newOrgState()
		}
		a.org.members[member] = rec
		return nil
	})
	if err != nil {
		return err
	}
	return each(prefixMemberUsage, func(k, v []byte) error {
		if len(k) != 1+2*ledger.AccountIDLen+7 {
			return fmt.Errorf("malformed member usage key %q", k)
		}
		if a.org == nil {
			return fmt.Errorf("member usage of %q, which has no members", a.id)
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return fmt.Errorf("member usage %q: %w", k, err)
		}
		a.org.used[usageKey{string(k[1+ledger.AccountIDLen : 1+2*ledger.AccountIDLen]), string(k[1+2*ledger.AccountIDLen:])}] = n
		return nil
	})
}

// membership is rec of member in org a as the API gives it, with its use this month.
func (s *Badger) membership(a *account, member string, rec memberRecord) ledger.Membership {
	m := ledger.Membership{OrgID: a.id, MemberID: member, OrgEmail: a.rec.Load().Email, Role: rec.Role,
		MonthlyCap: rec.MonthlyCap, Pending: rec.Pending, Created: rec.Created}
	m.Email = s.accountEmail(member)
	if a.org != nil {
		m.Used = a.org.used[usageKey{member, ledger.MonthOf(s.now())}]
	}
	return m
}

// members is org a's memberships, oldest first. Called with a.mu held.
func (s *Badger) members(a *account) []ledger.Membership {
	if a.org == nil {
		return nil
	}
	out := make([]ledger.Membership, 0, len(a.org.members))
	for id, rec := range a.org.members {
		out = append(out, s.membership(a, id, rec))
	}
	slices.SortFunc(out, func(x, y ledger.Membership) int {
		if c := x.Created.Compare(y.Created); c != 0 {
			return c
		}
		return compareStrings(x.MemberID, y.MemberID)
	})
	return out
}

// orgChange runs change for organisation orgID under its orgMu: change reads the organisation
// (with a.mu held) and returns the writes to make, and apply, which runs with a.mu held once
// they are durable. The result is change's. A change that protects the organisation (a
// removal, which revokes keys) goes on while the store takes no new work, as RevokeKey does.
func (s *Badger) orgChange(orgID string, protect bool, change func(a *account) ([]write, func(), error)) error {
	begin := s.beginWrite
	if protect {
		begin = s.beginChange
	}
	if err := begin(); err != nil {
		return err
	}
	defer s.life.End()
	a, err := s.account(orgID)
	if err != nil {
		return err
	}
	defer s.unpin(a)
	a.orgMu.Lock()
	defer a.orgMu.Unlock()
	a.mu.Lock()
	ws, apply, err := change(a)
	a.mu.Unlock()
	if err != nil || len(ws) == 0 {
		return err
	}
	if err := s.c.enqueue(ws).wait(); err != nil {
		return err
	}
	if apply != nil {
		a.mu.Lock()
		apply()
		a.mu.Unlock()
	}
	return nil
}

// MakeOrganisation turns the account into an organisation, itself its first owner.
func (s *Badger) MakeOrganisation(ctx context.Context, accountID string) (ledger.Membership, error) {
	var out ledger.Membership
	err := s.orgChange(accountID, false, func(a *account) ([]write, func(), error) {
		if a.org != nil {
			if rec, ok := a.org.members[a.id]; ok {
				out = s.membership(a, a.id, rec)
				return nil, nil, nil
			}
		}
		rec := memberRecord{Role: ledger.RoleOwner, Created: s.now().UTC()}
		out = s.membership(a, a.id, rec)
		s.someOrgs.Store(true) // before the membership's write: a load may read it from then on
		return []write{set(memberKey(a.id, a.id), mustJSON(rec)), set(memberOfKey(a.id, a.id), nil)}, func() {
			if a.org == nil {
				a.org = newOrgState()
			}
			a.org.members[a.id] = rec
		}, nil
	})
	return out, err
}

// AddMember makes memberID a member, or an invitee, of organisation orgID.
func (s *Badger) AddMember(ctx context.Context, orgID, memberID string, role ledger.Role, pending bool) (ledger.Membership, error) {
	if err := ledger.CheckRole(role); err != nil {
		return ledger.Membership{}, err
	}
	if orgID == memberID {
		return ledger.Membership{}, fmt.Errorf("an organisation is its own member already: %w", ledger.ErrInvalidArgument)
	}
	if err := s.exists(memberID); err != nil {
		return ledger.Membership{}, err
	}
	var out ledger.Membership
	err := s.orgChange(orgID, false, func(a *account) ([]write, func(), error) {
		if a.org == nil {
			return nil, nil, fmt.Errorf("account %q: %w", orgID, ledger.ErrNotOrganisation)
		}
		if _, ok := a.org.members[memberID]; ok {
			return nil, nil, fmt.Errorf("%q in %q: %w", memberID, orgID, ledger.ErrAlreadyMember)
		}
		rec := memberRecord{Role: role, Pending: pending, Created: s.now().UTC()}
		out = s.membership(a, memberID, rec)
		return []write{set(memberKey(orgID, memberID), mustJSON(rec)), set(memberOfKey(memberID, orgID), nil)},
			func() { a.org.members[memberID] = rec }, nil
	})
	return out, err
}

// updateMember changes memberID's record in orgID with f, after check.
func (s *Badger) updateMember(orgID, memberID string, check func([]ledger.Membership) error, f func(*memberRecord)) (ledger.Membership, error) {
	var out ledger.Membership
	err := s.orgChange(orgID, false, func(a *account) ([]write, func(), error) {
		if a.org == nil {
			return nil, nil, fmt.Errorf("%q in %q: %w", memberID, orgID, ledger.ErrNotMember)
		}
		rec, ok := a.org.members[memberID]
		if !ok {
			return nil, nil, fmt.Errorf("%q in %q: %w", memberID, orgID, ledger.ErrNotMember)
		}
		if check != nil {
			if err := check(s.members(a)); err != nil {
				return nil, nil, err
			}
		}
		f(&rec)
		out = s.membership(a, memberID, rec)
		return []write{set(memberKey(orgID, memberID), mustJSON(rec))}, func() { a.org.members[memberID] = rec }, nil
	})
	return out, err
}

// AcceptMembership completes an invitation.
func (s *Badger) AcceptMembership(ctx context.Context, orgID, memberID string) (ledger.Membership, error) {
	return s.updateMember(orgID, memberID, nil, func(r *memberRecord) { r.Pending = false })
}

// SetMemberRole changes a member's role, keeping an owner.
func (s *Badger) SetMemberRole(ctx context.Context, orgID, memberID string, role ledger.Role) (ledger.Membership, error) {
	if err := ledger.CheckRole(role); err != nil {
		return ledger.Membership{}, err
	}
	return s.updateMember(orgID, memberID, func(ms []ledger.Membership) error {
		_, err := ledger.MemberChange(ms, orgID, memberID, role, false)
		return err
	}, func(r *memberRecord) { r.Role = role })
}

// SetMemberCap sets a member's monthly cap (0: none).
func (s *Badger) SetMemberCap(ctx context.Context, orgID, memberID string, c int64) (ledger.Membership, error) {
	if err := ledger.CheckCap(c); err != nil {
		return ledger.Membership{}, err
	}
	return s.updateMember(orgID, memberID, nil, func(r *memberRecord) { r.MonthlyCap = c })
}

// RemoveMember ends a membership and revokes the member's keys in the same write.
func (s *Badger) RemoveMember(ctx context.Context, orgID, memberID string) ([]ledger.Key, error) {
	var revoked []ledger.Key
	err := s.orgChange(orgID, true, func(a *account) ([]write, func(), error) {
		if _, err := ledger.MemberChange(s.members(a), orgID, memberID, "", true); err != nil {
			return nil, nil, err
		}
		ws := []write{del(memberKey(orgID, memberID)), del(memberOfKey(memberID, orgID))}
		t := s.now().UTC()
		for _, e := range a.keys {
			if e.rec.Load().MemberID != memberID {
				continue
			}
			u := e.used.Load()
			k := e.keyWith(u)
			if !k.Revoked.IsZero() {
				continue
			}
			// Refused by LookupKey from here on, as RevokeKey does.
			k.Revoked = t
			pub := k
			pub.LastUsed = time.Time{}
			e.rec.Store(&pub)
			e.flushed = u
			ws = append(ws, e.recordWrite(k))
			revoked = append(revoked, k)
		}
		return ws, func() { delete(a.org.members, memberID) }, nil
	})
	return revoked, err
}

// GetMembership returns memberID's membership of orgID.
func (s *Badger) GetMembership(ctx context.Context, orgID, memberID string) (ledger.Membership, error) {
	if err := s.begin(); err != nil {
		return ledger.Membership{}, err
	}
	defer s.life.End()
	a, err := s.account(orgID)
	if err != nil {
		return ledger.Membership{}, fmt.Errorf("%q in %q: %w", memberID, orgID, ledger.ErrNotMember)
	}
	defer s.unpin(a)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.org != nil {
		if rec, ok := a.org.members[memberID]; ok {
			return s.membership(a, memberID, rec), nil
		}
	}
	return ledger.Membership{}, fmt.Errorf("%q in %q: %w", memberID, orgID, ledger.ErrNotMember)
}

// ListMembers lists an organisation's members and invitations, oldest first.
func (s *Badger) ListMembers(ctx context.Context, orgID string) ([]ledger.Membership, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	a, err := s.account(orgID)
	if err != nil {
		return nil, err
	}
	defer s.unpin(a)
	a.mu.Lock()
	defer a.mu.Unlock()
	return s.members(a), nil
}

// MembershipsOf lists the organisations memberID belongs or is invited to, oldest first.
func (s *Badger) MembershipsOf(ctx context.Context, memberID string) ([]ledger.Membership, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	var orgs []string
	err := s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, key1(prefixMemberOf, memberID), func(k, _ []byte) error {
			orgs = append(orgs, string(k[1+len(memberID):]))
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	out := []ledger.Membership{}
	for _, org := range orgs {
		a, err := s.account(org)
		if err != nil {
			continue
		}
		a.mu.Lock()
		if a.org != nil {
			if rec, ok := a.org.members[memberID]; ok {
				out = append(out, s.membership(a, memberID, rec))
			}
		}
		a.mu.Unlock()
		s.unpin(a)
	}
	slices.SortFunc(out, func(x, y ledger.Membership) int {
		if c := x.Created.Compare(y.Created); c != 0 {
			return c
		}
		return compareStrings(x.OrgID, y.OrgID)
	})
	return out, nil
}

// MemberUsage lists what each member's keys took in the months [from, to].
func (s *Badger) MemberUsage(ctx context.Context, orgID, from, to string) ([]ledger.MemberMonth, error) {
	if err := ledger.CheckMonth(from); err != nil {
		return nil, err
	}
	if err := ledger.CheckMonth(to); err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	a, err := s.account(orgID)
	if err != nil {
		return nil, err
	}
	defer s.unpin(a)
	out := []ledger.MemberMonth{}
	a.mu.Lock()
	if a.org != nil {
		for uk, n := range a.org.used {
			if uk.month >= from && uk.month <= to {
				out = append(out, ledger.MemberMonth{MemberID: uk.member, Month: uk.month, Credits: n})
			}
		}
	}
	a.mu.Unlock()
	for i := range out {
		out[i].Email = s.accountEmail(out[i].MemberID)
	}
	ledger.SortMemberMonths(out)
	return out, nil
}

// CreateMemberKey makes a key of organisation orgID for its accepted member memberID.
func (s *Badger) CreateMemberKey(ctx context.Context, orgID, memberID string, mode ledger.Mode, name string, expires time.Time, maxActive int) (string, ledger.Key, error) {
	a, err := s.account(orgID)
	if err != nil {
		return "", ledger.Key{}, err
	}
	defer s.unpin(a)
	// Held across the creation, so that RemoveMember (which takes it too) either comes first and
	// refuses the key here, or comes after and revokes it.
	a.orgMu.Lock()
	defer a.orgMu.Unlock()
	a.mu.Lock()
	ok := false
	if a.org != nil {
		rec, found := a.org.members[memberID]
		ok = found && !rec.Pending
	}
	a.mu.Unlock()
	if !ok {
		return "", ledger.Key{}, fmt.Errorf("%q in %q: %w", memberID, orgID, ledger.ErrNotMember)
	}
	if memberID == orgID {
		memberID = ""
	}
	return s.createKey(orgID, memberID, mode, name, expires, maxActive)
}

// exportMember gives a membership record (prefixMember) to an Export's sink.
func exportMember(sink ledger.ExportSink) func(k, v []byte) error {
	return func(k, v []byte) error {
		var rec memberRecord
		if err := json.Unmarshal(v, &rec); err != nil || len(k) != 1+2*ledger.AccountIDLen {
			return fmt.Errorf("membership %x: malformed (%v)", k, err)
		}
		return sink.Membership(ledger.Membership{OrgID: string(k[1 : 1+ledger.AccountIDLen]), MemberID: string(k[1+ledger.AccountIDLen:]),
			Role: rec.Role, MonthlyCap: rec.MonthlyCap, Pending: rec.Pending, Created: rec.Created})
	}
}

// exportMemberUsage gives a member's month (prefixMemberUsage) to an Export's sink.
func exportMemberUsage(sink ledger.ExportSink) func(k, v []byte) error {
	return func(k, v []byte) error {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || len(k) != 1+2*ledger.AccountIDLen+7 {
			return fmt.Errorf("member usage %x: malformed (%v)", k, err)
		}
		return sink.MemberUsage(ledger.ExportMemberUsage{OrgID: string(k[1 : 1+ledger.AccountIDLen]),
			MemberID: string(k[1+ledger.AccountIDLen : 1+2*ledger.AccountIDLen]), Month: string(k[1+2*ledger.AccountIDLen:]), Credits: n})
	}
}
