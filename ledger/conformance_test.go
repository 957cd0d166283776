package ledger

import (
	"bytes"
	"testing"
	"time"
)

// The conformance suite: what every engine must do, written against the role interfaces only
// (Store and its sentinel errors), never an engine's internals. An engine's test runs it with
// runConformance and an engine value of its own (badger_conformance_test.go for Badger).
//
// Each test opens a fresh store. Time is the package clock now, which tests set (setNow), so
// subtests do not run in parallel; an engine reads now for everything that expires (holds,
// sessions, Idempotency-Key records) and runs no expiry of its own during a test: the suite
// asks for it with engine.expire. An engine hashes passwords with password.go, whose argon2id
// calls the suite counts (testAuthenticateTiming).

// engine is what the conformance suite needs of one Store implementation.
type engine struct {
	// open returns a new, empty store that is closed when the test ends (Close is safe to call
	// twice, so a test may close it first). Its default hold TTL is holdTTL, or DefaultHoldTTL
	// for 0. Nothing in it may change the ledger on a timer of its own: no background expiry
	// sweep.
	open func(t *testing.T, holdTTL time.Duration) Store
	// expire does what the engine's expiry sweep does, once, by the clock now: it voids every
	// open hold past its expiry with reason "expired" and returns how many it voided.
	expire func(t *testing.T, s Store) (int, error)
	// stored returns every piece of data the store keeps (Badger: every key and value), for
	// checks that a secret never reaches the store.
	stored func(t *testing.T, s Store) [][]byte
}

// conformanceTests are the suite, by role.
var conformanceTests = []struct {
	name string
	run  func(t *testing.T, eng engine)
}{
	// Accounts (conformance_accounts_test.go).
	{"Accounts", testAccounts},
	{"ListAccountsPages", testListAccountsPages},
	// Keys (conformance_keys_test.go).
	{"CreateLookupRevokeKey", testCreateLookupRevokeKey},
	{"KeyLastUsed", testKeyLastUsed},
	{"CreateKeyCapped", testCreateKeyCapped},
	{"LookupKeyBalance", testLookupKeyBalance},
	// Keys with limits and rolls (conformance_keylimits_test.go).
	{"KeyBudgets", testKeyBudgets},
	{"KeyBudgetConcurrent", testKeyBudgetConcurrent},
	{"KeyRoll", testKeyRoll},
	{"FindKeys", testFindKeys},         // conformance_key_search_test.go
	{"MoneyBetween", testMoneyBetween}, // conformance_money_report_test.go
	{"KeyUpdate", testKeyUpdate},
	// Credits (conformance_credits_test.go).
	{"HoldSettleVoid", testHoldSettleVoid},
	{"TestModeIsSeparate", testTestModeIsSeparate},
	{"GrantIdempotentOnReference", testGrantIdempotentOnReference},
	{"HoldExpiry", testHoldExpiry},
	{"HoldOwnTTL", testHoldOwnTTL},
	{"PurchasesIdempotentOnReference", testPurchasesIdempotentOnReference},
	{"Purchase", testPurchase},
	{"RefillTestCredits", testRefillTestCredits},
	{"GetHold", testGetHold},
	{"SettleDecidedAfterSweep", testSettleDecidedAfterSweep}, // conformance_settle_late_test.go
	// Idempotency (conformance_idempotency_test.go).
	{"IdempotencyRecords", testIdempotencyRecords},
	{"IdempotencyReleaseAndTakeOver", testIdempotencyReleaseAndTakeOver},
	// Generations (conformance_generations_test.go).
	{"Generations", testGenerations},
	{"GenerationsMany", testGenerationsMany},
	// Credentials (conformance_credentials_test.go).
	{"SignUpAndAuthenticate", testSignUpAndAuthenticate},
	{"AuthenticateTiming", testAuthenticateTiming},
	{"Sessions", testSessions},
	{"SignUpConcurrentSameEmail", testSignUpConcurrentSameEmail},
	// Reports (conformance_reports_test.go).
	{"HistoryPages", testHistoryPages},
	{"Usage", testUsage},
	{"UsageByKey", testUsageByKey}, // conformance_usage_by_key_test.go
	// Maintenance (conformance_maintenance_test.go).
	{"Closed", testClosed},
	// Mail (conformance_outbox_test.go).
	{"Outbox", testOutbox},
	{"OutboxConcurrentClaims", testOutboxConcurrentClaims},
	{"ListMail", testListMail},
	{"DropMail", testDropMail},
	{"Tokens", testTokens},
	{"AccountMailState", testAccountMailState},
	{"LowBalanceChanges", testLowBalanceChanges}, // conformance_lowbalance_test.go
	{"LowBalanceChangesDefaultLimit", testLowBalanceChangesDefaultLimit},
	// Payments (conformance_payments_test.go).
	{"UnmatchedPayments", testUnmatchedPayments},
	{"UnmatchedPaymentRepeated", testUnmatchedPaymentRepeated},
	{"UnmatchedPaymentConcurrent", testUnmatchedPaymentConcurrent},
	{"ResolveUnmatchedPayment", testResolveUnmatchedPayment},
	{"ResolveUnmatchedPaymentConcurrent", testResolveUnmatchedPaymentConcurrent},
	{"UnmatchedPaymentsInvalid", testUnmatchedPaymentsInvalid},
	// Reversals (conformance_reversals_test.go).
	{"RefundIntoDebt", testRefundIntoDebt},
	{"RefundSmallPurchaseAgainstDebt", testRefundSmallPurchaseAgainstDebt},
	{"RefundPartialRounding", testRefundPartialRounding},
	{"RefundBeforePayment", testRefundBeforePayment},
	{"RefundConcurrent", testRefundConcurrent},
	{"RefundFailed", testRefundFailed},
	{"Disputes", testDisputes},
	{"Payments", testPayments},
	{"ReversalsInvalid", testReversalsInvalid},
	{"ReversalOrders", testReversalOrders}, // conformance_reversal_orders_test.go
	{"ReversalOfPendingPayment", testReversalOfPendingPayment},
	// Receipts (conformance_receipts_test.go).
	{"ReceiptKeys", testReceiptKeys},
	{"ReceiptKeysConcurrent", testReceiptKeysConcurrent},
	{"ReceiptDigests", testReceiptDigests},
	// Members (conformance_members_test.go).
	{"MembershipRules", testMembershipRules},
	{"RemoveMemberRevokesKeys", testRemoveMemberRevokesKeys},
	{"MemberCap", testMemberCap},
	{"MemberCapMonths", testMemberCapMonths},
	{"MemberCapRace", testMemberCapRace},
	{"MemberCapKeyBudget", testMemberCapKeyBudget},
	// Operators of the console (conformance_operators_test.go).
	{"Operators", testOperators},
	{"OperatorSecondFactor", testOperatorSecondFactor},
	{"OperatorSessions", testOperatorSessions},
	{"Audit", testAudit},
	{"OperatorsInvalid", testOperatorsInvalid},
	// Several roles under concurrent load (conformance_concurrency_test.go).
	{"ConcurrentHolds", testConcurrentHolds},
	{"ConcurrentAccounts", testConcurrentAccounts},
	{"ConcurrentReplays", testConcurrentReplays},
}

// runConformance runs the whole suite on eng, one subtest per test.
func runConformance(t *testing.T, eng engine) {
	for _, c := range conformanceTests {
		t.Run(c.name, func(t *testing.T) { c.run(t, eng) })
	}
}

// assertNotStored fails the test if any of secrets appears in what s stores.
func assertNotStored(t *testing.T, eng engine, s Store, secrets ...string) {
	t.Helper()
	for _, piece := range eng.stored(t, s) {
		for _, secret := range secrets {
			if bytes.Contains(piece, []byte(secret)) {
				t.Errorf("the secret %q is stored in the ledger: %q", secret, piece)
			}
		}
	}
}
