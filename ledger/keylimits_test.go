package ledger

import (
	"net/netip"
	"testing"
)

// TestKeyLimitsAllows: a key's tools and address ranges, IPv4 and IPv6, an IPv4-mapped IPv6
// address taken as its IPv4 address; no ranges or tools allow everything.
func TestKeyLimitsAllows(t *testing.T) {
	l := KeyLimits{AllowedTools: []string{"summarizer"}, AllowedCIDRs: []string{"203.0.113.0/24", "2001:db8::/32"}}
	for addr, want := range map[string]bool{
		"203.0.113.9": true, "203.0.114.1": false, "::ffff:203.0.113.5": true,
		"2001:db8:ffff::1": true, "2001:db9::1": false, "::1": false,
	} {
		if got := l.AllowsAddr(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %v, want %v", addr, got, want)
		}
	}
	if !l.AllowsTool("summarizer") || l.AllowsTool("email-writer") {
		t.Error("allowed tools")
	}
	var none KeyLimits
	if !none.AllowsTool("email-writer") || !none.AllowsAddr(netip.MustParseAddr("198.51.100.1")) || none.HasBudget() {
		t.Error("no limits limit something")
	}
}
