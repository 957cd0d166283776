package ledger

// What one member of an organisation may do to another's keys and membership: the one rule
// every caller applies (My Account's pages and forms, the admin API's roll), so that no path
// decides it differently. The ledger itself stores keys and members without asking who acts;
// callers ask Allowed first.
//
// A key's secret is only ever shown to the member the key belongs to: nobody rolls a key that
// is not theirs. Owners manage every key and member; admins see, limit, rename and revoke the
// keys of members below them (never an owner's or another admin's) and remove those members;
// a member acts on their own keys only. Everybody may do everything to their own keys, and
// leave.

// Action is what a member does to a key or to another member.
type Action string

const (
	// ActKeySee: see the key in the list, its limits and use (never its secret).
	ActKeySee Action = "key.see"
	// ActKeyLimits: change the key's budgets, tools, address ranges, expiry and note.
	ActKeyLimits Action = "key.limits"
	// ActKeyRename: change the key's name.
	ActKeyRename Action = "key.rename"
	// ActKeyRevoke: revoke the key.
	ActKeyRevoke Action = "key.revoke"
	// ActKeyRoll: give the key a new secret, shown to whoever rolls it.
	ActKeyRoll Action = "key.roll"

	// ActMemberRemove: end a membership or an invitation (and revoke the member's keys).
	ActMemberRemove Action = "member.remove"
	// ActMemberRole: change a member's role.
	ActMemberRole Action = "member.role"
	// ActMemberCap: set a member's monthly cap.
	ActMemberCap Action = "member.cap"
	// ActMemberInvite: invite someone with a role (the target role is the role invited).
	ActMemberInvite Action = "member.invite"
)

// Allowed reports whether a member whose role is actor may do act to a key or member whose
// role is target. self is whether the key is the actor's own (KeyMember is the actor) or the
// member is the actor. target is "" for someone who is no longer an accepted member (a removed
// member's keys, which are revoked): they rank below every member.
//
// A personal account's login is its owner, and its keys are its own.
func Allowed(actor Role, self bool, target Role, act Action) bool {
	if CheckRole(actor) != nil {
		return false
	}
	below := rank(target) < rank(actor)
	switch act {
	case ActKeySee, ActKeyLimits, ActKeyRename, ActKeyRevoke:
		return self || actor == RoleOwner || (actor == RoleAdmin && below)
	case ActKeyRoll:
		// The new secret is shown to whoever rolls: only to the key's member.
		return self
	case ActMemberRemove:
		// Removing oneself is leaving.
		return self || actor == RoleOwner || (actor == RoleAdmin && below)
	case ActMemberRole, ActMemberCap:
		return actor == RoleOwner
	case ActMemberInvite:
		return CheckRole(target) == nil && (actor == RoleOwner || (actor == RoleAdmin && below))
	}
	return false
}

// rank orders the roles; anything else (no longer a member) is below them all.
func rank(r Role) int {
	switch r {
	case RoleOwner:
		return 3
	case RoleAdmin:
		return 2
	case RoleMember:
		return 1
	}
	return 0
}
