package ledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// Organisations: an account whose members, other accounts each with a login of its own, share
// its credits. An account becomes one with MakeOrganisation; it is then its own first owner
// (MemberID == OrgID, "the founder"), its credits and keys stay, and its keys without a member
// (Key.MemberID == "") count as the founder's. Every member's keys spend the organisation's
// credits; a member may have a monthly cap of live credits (a UTC calendar month), counted
// atomically with the hold on every engine (badgerledger/member_caps.go, and ledger_member_take in
// the PostgreSQL schema). A personal account is untouched by any of this.

// Role is what a member may do in an organisation. The ledger keeps the roles and their one
// structural rule (an organisation always has an owner); what each role may do is the caller's
// (caddymodule/account).
type Role string

const (
	// RoleOwner: billing (buying credits), members, everything.
	RoleOwner Role = "owner"
	// RoleAdmin: members and every member's keys.
	RoleAdmin Role = "admin"
	// RoleMember: their own keys and usage.
	RoleMember Role = "member"
)

// Membership is one member of one organisation.
type Membership struct {
	OrgID    string `json:"org_id"`
	MemberID string `json:"member_id"`
	// Email is the member's login address, and OrgEmail the organisation's (as listed).
	Email    string `json:"email"`
	OrgEmail string `json:"org_email"`
	Role     Role   `json:"role"`
	// MonthlyCap is the most live credits the member's keys may take in one UTC calendar month;
	// 0: no cap but the organisation's balance.
	MonthlyCap int64 `json:"monthly_cap"`
	// Used is what the member's keys took this UTC month (by the ledger clock when listed):
	// credits settled or still held.
	Used int64 `json:"used"`
	// Pending is an invitation not accepted yet: it grants nothing.
	Pending bool      `json:"pending,omitempty"`
	Created time.Time `json:"created"`
}

// MemberMonth is what one member's keys took in one UTC month.
type MemberMonth struct {
	MemberID string `json:"member_id"`
	Email    string `json:"email"`
	Month    string `json:"month"` // YYYY-MM
	Credits  int64  `json:"credits"`
}

// Members are the organisations' memberships. Every change of one organisation's members is
// serialised with the others and with CreateMemberKey, on every instance.
type Members interface {
	// MakeOrganisation turns the account into an organisation whose first owner is the account
	// itself; its credits, keys and login stay. Repeating it changes nothing. The founder's
	// membership is returned.
	//
	// Expected errors:
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed.
	MakeOrganisation(ctx context.Context, accountID string) (Membership, error)

	// AddMember makes account memberID a member of organisation orgID with role; pending makes
	// it an invitation that AcceptMembership completes.
	//
	// Expected errors:
	//   - ErrInvalidArgument: a bad role, a negative cap, or memberID == orgID.
	//   - ErrNotFound: no account has orgID or memberID.
	//   - ErrNotOrganisation: orgID is not an organisation.
	//   - ErrAlreadyMember: memberID is a member, or invited, already.
	//   - ErrClosed.
	AddMember(ctx context.Context, orgID, memberID string, role Role, pending bool) (Membership, error)

	// AcceptMembership completes an invitation. Accepting twice changes nothing.
	//
	// Expected errors:
	//   - ErrNotMember: memberID is neither a member of orgID nor invited to it.
	//   - ErrClosed.
	AcceptMembership(ctx context.Context, orgID, memberID string) (Membership, error)

	// SetMemberRole changes a member's role.
	//
	// Expected errors:
	//   - ErrInvalidArgument: a bad role.
	//   - ErrNotMember: memberID is not a member of orgID.
	//   - ErrLastOwner: it would leave the organisation without an accepted owner.
	//   - ErrClosed.
	SetMemberRole(ctx context.Context, orgID, memberID string, role Role) (Membership, error)

	// SetMemberCap sets a member's monthly cap of live credits (0: none). A cap below what the
	// member took this month refuses their next hold until the month ends.
	//
	// Expected errors:
	//   - ErrInvalidArgument: cap is negative.
	//   - ErrNotMember: memberID is not a member of orgID.
	//   - ErrClosed.
	SetMemberCap(ctx context.Context, orgID, memberID string, cap int64) (Membership, error)

	// RemoveMember ends a membership or an invitation, and revokes the member's keys of the
	// organisation in the same write: the next LookupKey of any of them fails, on every
	// instance. It returns the keys it revoked.
	//
	// Expected errors:
	//   - ErrInvalidArgument: memberID is the organisation's own account (its founder's login).
	//   - ErrNotMember: memberID is not a member of orgID.
	//   - ErrLastOwner: memberID is the last accepted owner.
	//   - ErrClosed.
	RemoveMember(ctx context.Context, orgID, memberID string) ([]Key, error)

	// GetMembership returns memberID's membership of orgID, with Used.
	//
	// Expected errors:
	//   - ErrNotMember: memberID is neither a member of orgID nor invited to it.
	//   - ErrClosed.
	GetMembership(ctx context.Context, orgID, memberID string) (Membership, error)

	// ListMembers lists an organisation's members and invitations, oldest first, with Used.
	// A personal account has none.
	//
	// Expected errors:
	//   - ErrNotFound: no account has orgID.
	//   - ErrClosed.
	ListMembers(ctx context.Context, orgID string) ([]Membership, error)

	// MembershipsOf lists the organisations memberID belongs or is invited to, oldest first.
	//
	// Expected errors:
	//   - ErrClosed.
	MembershipsOf(ctx context.Context, memberID string) ([]Membership, error)

	// MemberUsage lists what each member's keys took in the UTC months [from, to] (months as
	// YYYY-MM), by month and member.
	//
	// Expected errors:
	//   - ErrInvalidArgument: a month that is not YYYY-MM.
	//   - ErrNotFound: no account has orgID.
	//   - ErrClosed.
	MemberUsage(ctx context.Context, orgID, from, to string) ([]MemberMonth, error)

	// CreateMemberKey is CreateKeyCapped for a key of organisation orgID made by member
	// memberID (Key.MemberID), who must be an accepted member at that moment: a key is never
	// created for someone RemoveMember has removed.
	//
	// Expected errors: those of CreateKeyCapped, and ErrNotMember.
	CreateMemberKey(ctx context.Context, orgID, memberID string, mode Mode, name string, expires time.Time, maxActive int) (string, Key, error)
}

// KeyMember is the member whose key k is: its MemberID, or its account's own (the founder's).
func KeyMember(k Key) string {
	if k.MemberID != "" {
		return k.MemberID
	}
	return k.AccountID
}

// MonthOf is the UTC calendar month of t as YYYY-MM, the period of a member's cap.
func MonthOf(t time.Time) string { return t.UTC().Format("2006-01") }

// MemberCapResets is when the member cap's month that contains t ends (UTC).
func MemberCapResets(t time.Time) time.Time {
	u := t.UTC()
	return time.Date(u.Year(), u.Month()+1, 1, 0, 0, 0, 0, time.UTC)
}

func CheckRole(r Role) error {
	switch r {
	case RoleOwner, RoleAdmin, RoleMember:
		return nil
	}
	return fmt.Errorf("role %q is not owner, admin or member: %w", r, ErrInvalidArgument)
}

func CheckMonth(m string) error {
	if _, err := time.Parse("2006-01", m); err != nil || len(m) != 7 {
		return fmt.Errorf("month %q is not YYYY-MM: %w", m, ErrInvalidArgument)
	}
	return nil
}

func CheckCap(c int64) error {
	if c < 0 {
		return fmt.Errorf("monthly cap %d is negative: %w", c, ErrInvalidArgument)
	}
	return nil
}

// ownersLeft counts the accepted owners of ms other than memberID.
func ownersLeft(ms []Membership, memberID string) int {
	n := 0
	for _, m := range ms {
		if m.MemberID != memberID && m.Role == RoleOwner && !m.Pending {
			n++
		}
	}
	return n
}

// MemberChange decides a role change or removal of memberID against the organisation's
// members ms, the one rule both engines apply: an organisation keeps an accepted owner, and
// its founder (its own account) stays a member.
func MemberChange(ms []Membership, orgID, memberID string, newRole Role, remove bool) (Membership, error) {
	var cur *Membership
	for i := range ms {
		if ms[i].MemberID == memberID {
			cur = &ms[i]
		}
	}
	if cur == nil {
		return Membership{}, fmt.Errorf("%q in organisation %q: %w", memberID, orgID, ErrNotMember)
	}
	if remove && memberID == orgID {
		return Membership{}, fmt.Errorf("the organisation's own login cannot leave it: %w", ErrInvalidArgument)
	}
	if cur.Role == RoleOwner && !cur.Pending && (remove || newRole != RoleOwner) && ownersLeft(ms, memberID) == 0 {
		return Membership{}, fmt.Errorf("%q is the last owner of %q: %w", memberID, orgID, ErrLastOwner)
	}
	return *cur, nil
}

// SortMemberMonths orders a usage by member by month, then member: the order every engine
// returns it in.
func SortMemberMonths(out []MemberMonth) {
	slices.SortFunc(out, func(x, y MemberMonth) int {
		if c := cmp.Compare(x.Month, y.Month); c != 0 {
			return c
		}
		return cmp.Compare(x.MemberID, y.MemberID)
	})
}
