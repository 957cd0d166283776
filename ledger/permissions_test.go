package ledger

import "testing"

// TestAllowed is the rule of who may do what to whose key or membership, written out whole:
// every actor's role against every target (an owner, an admin, a member, someone no longer a
// member, and the actor themself), for every action. The HTTP paths that use it are tested in
// caddymodule/account (TestKeyActionsByRole) and caddymodule/operator.
func TestAllowed(t *testing.T) {
	const (
		y = true
		n = false
	)
	type targets struct{ owner, admin, member, gone, self bool }
	want := map[Action]map[Role]targets{
		ActKeySee:       {RoleOwner: {y, y, y, y, y}, RoleAdmin: {n, n, y, y, y}, RoleMember: {n, n, n, n, y}},
		ActKeyLimits:    {RoleOwner: {y, y, y, y, y}, RoleAdmin: {n, n, y, y, y}, RoleMember: {n, n, n, n, y}},
		ActKeyRename:    {RoleOwner: {y, y, y, y, y}, RoleAdmin: {n, n, y, y, y}, RoleMember: {n, n, n, n, y}},
		ActKeyRevoke:    {RoleOwner: {y, y, y, y, y}, RoleAdmin: {n, n, y, y, y}, RoleMember: {n, n, n, n, y}},
		ActKeyRoll:      {RoleOwner: {n, n, n, n, y}, RoleAdmin: {n, n, n, n, y}, RoleMember: {n, n, n, n, y}},
		ActMemberRemove: {RoleOwner: {y, y, y, y, y}, RoleAdmin: {n, n, y, y, y}, RoleMember: {n, n, n, n, y}},
		ActMemberRole:   {RoleOwner: {y, y, y, y, y}, RoleAdmin: {n, n, n, n, n}, RoleMember: {n, n, n, n, n}},
		ActMemberCap:    {RoleOwner: {y, y, y, y, y}, RoleAdmin: {n, n, n, n, n}, RoleMember: {n, n, n, n, n}},
		// The target of an invitation is the role invited; "gone" is no role at all.
		ActMemberInvite: {RoleOwner: {y, y, y, n, y}, RoleAdmin: {n, n, y, n, n}, RoleMember: {n, n, n, n, n}},
	}
	for act, byActor := range want {
		for actor, w := range byActor {
			for _, c := range []struct {
				name   string
				self   bool
				target Role
				want   bool
			}{
				{"an owner", false, RoleOwner, w.owner},
				{"an admin", false, RoleAdmin, w.admin},
				{"a member", false, RoleMember, w.member},
				{"someone no longer a member", false, "", w.gone},
				{"themself", true, actor, w.self},
			} {
				if got := Allowed(actor, c.self, c.target, act); got != c.want {
					t.Errorf("%s %s on %s: allowed %v, want %v", actor, act, c.name, got, c.want)
				}
			}
		}
	}
	for _, bad := range []Role{"", "root", "Owner"} {
		if Allowed(bad, true, RoleMember, ActKeySee) {
			t.Errorf("role %q may act", bad)
		}
	}
	if Allowed(RoleOwner, false, RoleMember, "key.steal") {
		t.Error("an unknown action is allowed")
	}
}
