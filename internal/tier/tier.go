// Package tier is test support: the two tiers of the test suite. The full tier (`go test ./...`,
// the README's command and CI's) runs every test against the real parts: the pinned Ollama,
// PostgreSQL, redis-server, mailpit, stripe-mock, Chromium and the built caddy binary. The fast
// tier (`go test -short ./...`) is for a contributor after a change: it runs what needs none of
// them (the handler's charging rules against the in-process fault server, the ledger's
// conformance suite on Badger, the parsers), and every test that needs one skips, naming it.
package tier

import "testing"

// Full skips t in the fast tier (-short), saying which real part it needs; in the full tier it
// does nothing, and the test fails if the part is missing, never skips.
func Full(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: the full tier (go test without -short) runs it", needs)
	}
}
