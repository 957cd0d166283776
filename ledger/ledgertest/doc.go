// Package ledgertest is the conformance suite of ledger.Store: what every engine must do, so
// that an engine, in this repository or outside it, proves itself by running it from its own
// tests:
//
//	func TestConformance(t *testing.T) {
//		ledgertest.Run(t, ledgertest.Engine{Open: ..., Expire: ..., Stored: ...})
//	}
//
// Its helpers (MustAccount, MustGrant, VerifyClean, ...) are also for an engine's own tests.
package ledgertest
