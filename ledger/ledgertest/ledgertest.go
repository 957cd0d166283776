package ledgertest

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Engine is one ledger.Store implementation as the suite sees it.
type Engine struct {
	// Open returns a new, empty store that is closed when the test ends (Close is safe to call
	// twice, so a test may close it first), opened with o. Nothing in it may change the ledger
	// on a timer of its own: no background expiry sweep (the suite calls Expire).
	Open func(t *testing.T, o Options) ledger.Store
	// Expire does what the engine's expiry sweep does, once, by the store's clock: it voids
	// every open hold past its expiry with reason "expired" and returns how many it voided.
	Expire func(t *testing.T, s ledger.Store) (int, error)
	// Stored returns every piece of data the store keeps (Badger: every key and value), for
	// checks that a secret never reaches the store.
	Stored func(t *testing.T, s ledger.Store) [][]byte
}

// Options is what the suite asks of a store it opens.
type Options struct {
	// HoldTTL is the store's default hold TTL; 0 means ledger.DefaultHoldTTL.
	HoldTTL time.Duration
	// Now is the clock the store must read for everything it records or lets expire (holds,
	// sessions, tokens, Idempotency-Key records, entry times). The suite moves it instead of
	// sleeping, so its tests do not run in parallel.
	Now func() time.Time
}

// Run runs the conformance suite on e, one subtest per test: what every engine must do,
// written against the role interfaces (ledger.Store and its sentinel errors) only, never an
// engine's internals. Each test opens fresh stores on a clock of its own. An engine hashes
// passwords with the ledger's HashPassword, whose argon2id calls the suite counts
// (testAuthenticateTiming).
func Run(t *testing.T, e Engine) {
	for _, c := range conformanceTests {
		t.Run(c.name, func(t *testing.T) {
			clk := &clock{}
			c.run(t, engine{
				clock: clk,
				open: func(t *testing.T, holdTTL time.Duration) ledger.Store {
					return e.Open(t, Options{HoldTTL: holdTTL, Now: clk.now})
				},
				expire: e.Expire,
				stored: e.Stored,
			})
		})
	}
}

// engine is an Engine for one test: its stores share the test's clock.
type engine struct {
	clock  *clock
	open   func(t *testing.T, holdTTL time.Duration) ledger.Store
	expire func(t *testing.T, s ledger.Store) (int, error)
	stored func(t *testing.T, s ledger.Store) [][]byte
}

// setNow fixes the test's clock to *at (read on every call) until the test ends. Move *at only
// while no call of the store can read it.
func (e engine) setNow(t testing.TB, at *time.Time) {
	t.Helper()
	e.clock.set(t, at)
}

// clock is one test's time: time.Now until the test fixes it.
type clock struct {
	mu sync.Mutex
	at *time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	at := c.at
	c.mu.Unlock()
	if at == nil {
		return time.Now()
	}
	return *at
}

func (c *clock) set(t testing.TB, at *time.Time) {
	c.mu.Lock()
	old := c.at
	c.at = at
	c.mu.Unlock()
	t.Cleanup(func() {
		c.mu.Lock()
		c.at = old
		c.mu.Unlock()
	})
}

// conformanceTests are the suite, by role.
var conformanceTests = []struct {
	name string
	run  func(t *testing.T, eng engine)
}{
	// Accounts (accounts.go).
	{"Accounts", testAccounts},
	{"ListAccountsPages", testListAccountsPages},
	// Keys (keys.go).
	{"CreateLookupRevokeKey", testCreateLookupRevokeKey},
	{"KeyLastUsed", testKeyLastUsed},
	{"CreateKeyCapped", testCreateKeyCapped},
	{"LookupKeyBalance", testLookupKeyBalance},
	// Keys with limits and rolls (keylimits.go).
	{"KeyBudgets", testKeyBudgets},
	// Holds with a price (prices.go).
	{"HoldPrice", testHoldPrice},
	{"HoldPriceRace", testHoldPriceRace},
	{"HoldPriceBudgets", testHoldPriceBudgets},
	{"KeyBudgetConcurrent", testKeyBudgetConcurrent},
	{"KeyCountOnlyWithBudget", testKeyCountOnlyWithBudget},
	{"KeyRoll", testKeyRoll},
	{"FindKeys", testFindKeys},         // key_search.go
	{"MoneyBetween", testMoneyBetween}, // money_report.go
	{"KeyUpdate", testKeyUpdate},
	// Credits (credits.go).
	{"HoldSettleVoid", testHoldSettleVoid},
	{"HoldNewID", testHoldNewID},
	{"TestModeIsSeparate", testTestModeIsSeparate},
	{"GrantIdempotentOnReference", testGrantIdempotentOnReference},
	{"HoldExpiry", testHoldExpiry},
	{"HoldOwnTTL", testHoldOwnTTL},
	{"PurchasesIdempotentOnReference", testPurchasesIdempotentOnReference},
	{"Purchase", testPurchase},
	{"RefillTestCredits", testRefillTestCredits},
	{"GetHold", testGetHold},
	{"SettleDecidedAfterSweep", testSettleDecidedAfterSweep}, // settle_late.go
	// Idempotency (idempotency.go).
	{"IdempotencyRecords", testIdempotencyRecords},
	{"IdempotencyReleaseAndTakeOver", testIdempotencyReleaseAndTakeOver},
	// Generations (generations.go).
	{"Generations", testGenerations},
	{"GenerationsMany", testGenerationsMany},
	// Credentials (credentials.go).
	{"SignUpAndAuthenticate", testSignUpAndAuthenticate},
	{"AuthenticateTiming", testAuthenticateTiming},
	{"Sessions", testSessions},
	{"SignUpConcurrentSameEmail", testSignUpConcurrentSameEmail},
	// Reports (reports.go).
	{"HistoryPages", testHistoryPages},
	{"Usage", testUsage},
	{"UsageByKey", testUsageByKey}, // usage_by_key.go
	// Maintenance (maintenance.go).
	{"Closed", testClosed},
	// Mail (outbox.go).
	{"Outbox", testOutbox},
	{"OutboxConcurrentClaims", testOutboxConcurrentClaims},
	{"ListMail", testListMail},
	{"DropMail", testDropMail},
	{"Tokens", testTokens},
	{"AccountMailState", testAccountMailState},
	{"LowBalanceChanges", testLowBalanceChanges}, // lowbalance.go
	{"LowBalanceChangesDefaultLimit", testLowBalanceChangesDefaultLimit},
	// Payments (payments.go).
	{"UnmatchedPayments", testUnmatchedPayments},
	{"UnmatchedPaymentRepeated", testUnmatchedPaymentRepeated},
	{"UnmatchedPaymentConcurrent", testUnmatchedPaymentConcurrent},
	{"ResolveUnmatchedPayment", testResolveUnmatchedPayment},
	{"ResolveUnmatchedPaymentConcurrent", testResolveUnmatchedPaymentConcurrent},
	{"UnmatchedPaymentsInvalid", testUnmatchedPaymentsInvalid},
	// Automatic top-ups (topups.go).
	{"TopUpRules", testTopUpRules},
	{"TopUpLifecycle", testTopUpLifecycle},
	{"TopUpRace", testTopUpRace},
	// Reversals (reversals.go).
	{"RefundIntoDebt", testRefundIntoDebt},
	{"RefundSmallPurchaseAgainstDebt", testRefundSmallPurchaseAgainstDebt},
	{"RefundPartialRounding", testRefundPartialRounding},
	{"RefundBeforePayment", testRefundBeforePayment},
	{"RefundConcurrent", testRefundConcurrent},
	{"RefundFailed", testRefundFailed},
	{"Disputes", testDisputes},
	{"Payments", testPayments},
	{"ReversalsInvalid", testReversalsInvalid},
	{"ReversalOrders", testReversalOrders}, // reversal_orders.go
	{"ReversalOfPendingPayment", testReversalOfPendingPayment},
	// Credits that expire (expiry.go).
	{"ExpirySpendsSoonestFirst", testExpirySpendsSoonestFirst},
	{"ExpiryWithOpenHoldSettled", testExpiryWithOpenHold(true)},
	{"ExpiryWithOpenHoldVoided", testExpiryWithOpenHold(false)},
	{"ExpiryTwoLots", testExpiryTwoLots},
	{"ExpiryRefundTakesOwnLotFirst", testExpiryRefund},
	{"ExpiryInvalid", testExpiryInvalid},
	// Receipts (receipts.go).
	{"ReceiptKeys", testReceiptKeys},
	{"ReceiptKeysConcurrent", testReceiptKeysConcurrent},
	{"ReceiptDigests", testReceiptDigests},
	// Members (members.go).
	{"MembershipRules", testMembershipRules},
	{"RemoveMemberRevokesKeys", testRemoveMemberRevokesKeys},
	{"MemberCap", testMemberCap},
	{"MemberCapMonths", testMemberCapMonths},
	{"MemberCapRace", testMemberCapRace},
	{"MemberCapKeyBudget", testMemberCapKeyBudget},
	// Operators of the console (operators.go).
	{"Operators", testOperators},
	{"OperatorSecondFactor", testOperatorSecondFactor},
	{"OperatorSessions", testOperatorSessions},
	{"Audit", testAudit},
	{"OperatorsInvalid", testOperatorsInvalid},
	// Redemption codes (codes.go).
	{"Codes", testCodes},
	// Alerts to the account's endpoints (alerts.go).
	{"AlertEndpoints", testAlertEndpoints},
	{"AlertDeliveries", testAlertDeliveries},
	{"AlertConcurrentClaims", testAlertConcurrentClaims},
	{"AlertAccountsAndNotes", testAlertAccountsAndNotes},
	{"CodeExpiry", testCodeExpiry},
	{"RedeemOnceConcurrent", testRedeemOnceConcurrent},
	{"RedeemUsesConcurrent", testRedeemUsesConcurrent},
	// Several roles under concurrent load (concurrency.go).
	{"ConcurrentHolds", testConcurrentHolds},
	{"ConcurrentAccounts", testConcurrentAccounts},
	{"ConcurrentReplays", testConcurrentReplays},
}

// assertNotStored fails the test if any of secrets appears in what s stores.
func assertNotStored(t *testing.T, eng engine, s ledger.Store, secrets ...string) {
	t.Helper()
	for _, piece := range eng.stored(t, s) {
		for _, secret := range secrets {
			if bytes.Contains(piece, []byte(secret)) {
				t.Errorf("the secret %q is stored in the ledger: %q", secret, piece)
			}
		}
	}
}
