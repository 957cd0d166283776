package pgledger

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestCopyLedger fills a Badger ledger with everything a server makes, copies it into an empty
// PostgreSQL database, and checks that the PostgreSQL side gives what Badger gave: balances,
// the old keys, log-ins and sessions, purchases, histories, key lists, Idempotency-Keys,
// unmatched payments, and a clean Verify; then that the copy goes on working (an open hold
// settles, links sent before work once, queued e-mail is sent) and that a second copy into the
// same database is refused.
func TestCopyLedger(t *testing.T) {
	t0 := time.Date(2030, 7, 1, 10, 0, 0, 123456789, time.UTC)
	setNow(t, &t0)
	from := openBadger(t, t.TempDir())

	alice, err := from.CreateAccountWithPassword(bg, "alice@example.com", ledgertest.GoodPassword)
	if err != nil {
		t.Fatal(err)
	}
	bob := ledgertest.MustAccount(t, from, "bob@example.com")
	liveKey, lk, err := from.CreateKey(bg, alice.ID, ledger.Live, "laptop", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// The live key has limits, spends (below) and is rolled with a grace period: the copy
	// carries its limits, its counts and both its secrets.
	if _, err := from.UpdateKey(bg, alice.ID, lk.ID, ledger.KeySettings{Name: "laptop", Limits: ledger.KeyLimits{Note: "mine",
		BudgetTotal: 100, BudgetDay: 10, BudgetMonth: 50, AllowedTools: []string{"summarize"}, AllowedCIDRs: []string{"10.0.0.0/8", "2001:db8::/32"}}}); err != nil {
		t.Fatal(err)
	}
	rolledOld := liveKey
	if liveKey, _, err = from.RollKey(bg, alice.ID, lk.ID, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	testKey, _, err := from.CreateKey(bg, alice.ID, ledger.Test, "ci", t0.Add(30*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	revoked, rk, err := from.CreateKey(bg, bob.ID, ledger.Live, "old", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := from.RevokeKey(bg, bob.ID, rk.ID); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"cs_1", "cs_2"} {
		if _, err := from.Grant(bg, ledger.GrantRequest{AccountID: alice.ID, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10,
			Reference: ref, AmountCents: 900, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := from.Grant(bg, ledger.GrantRequest{AccountID: bob.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 5, Reference: "welcome"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := from.RefillTestCredits(bg, alice.ID, 50); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Minute)
	if _, _, err := from.LookupKey(bg, liveKey); err != nil {
		t.Fatal(err)
	}
	for i, m := range []ledger.Mode{ledger.Live, ledger.Live, ledger.Test, ledger.Live} {
		rid := []string{"r1", "r2", "r3", "r4"}[i]
		price := []int64{3, 1, 1, 2}[i] // r1 settles a price of 3; r4 stays open holding 2
		if _, err := from.Hold(bg, ledger.HoldRequest{AccountID: alice.ID, Mode: m, RequestID: rid, KeyID: lk.ID, Tool: "summarize", Credits: price}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := from.Settle(bg, alice.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := from.Void(bg, alice.ID, "r2", "backend_error"); err != nil {
		t.Fatal(err)
	}
	if _, err := from.Settle(bg, alice.ID, "r3"); err != nil {
		t.Fatal(err)
	}
	// r4 stays open.
	// alice's account became an organisation; bob is a member with a cap and a key of it, which
	// took one credit this month; carol is invited.
	if _, err := from.MakeOrganisation(bg, alice.ID); err != nil {
		t.Fatal(err)
	}
	carol := ledgertest.MustAccount(t, from, "carol@example.com")
	if _, err := from.AddMember(bg, alice.ID, bob.ID, ledger.RoleAdmin, false); err != nil {
		t.Fatal(err)
	}
	if _, err := from.AddMember(bg, alice.ID, carol.ID, ledger.RoleMember, true); err != nil {
		t.Fatal(err)
	}
	if _, err := from.SetMemberCap(bg, alice.ID, bob.ID, 7); err != nil {
		t.Fatal(err)
	}
	bobsKey, bk, err := from.CreateMemberKey(bg, alice.ID, bob.ID, ledger.Live, "bob's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := from.Hold(bg, ledger.HoldRequest{AccountID: alice.ID, Mode: ledger.Live, RequestID: "r5", KeyID: bk.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := from.Settle(bg, alice.ID, "r5"); err != nil {
		t.Fatal(err)
	}
	// Money that flows back: cs_1 refunded in full, cs_2 disputed, which leaves alice in debt;
	// a delayed payment of bob's still pending.
	for _, p := range []ledger.Payment{
		{ID: "pi_1", Reference: "cs_1", AccountID: alice.ID, Credits: 10, AmountCents: 900, Currency: "eur", Status: ledger.PaymentPaid},
		{ID: "pi_2", Reference: "cs_2", AccountID: alice.ID, Credits: 10, AmountCents: 900, Currency: "eur", Status: ledger.PaymentPaid},
		{ID: "pi_bob", Reference: "cs_bob", AccountID: bob.ID, AmountCents: 200, Currency: "eur", Status: ledger.PaymentPending},
	} {
		ledgertest.MustRecordPayment(t, from, p)
	}
	ledgertest.MustReverse(t, from, ledger.ReversalRequest{ID: "re_1", Kind: ledger.ReversalRefund, Payment: "pi_1", AmountCents: 900, Currency: "eur", Status: ledger.RefundApplied})
	ledgertest.MustReverse(t, from, ledger.ReversalRequest{ID: "du_2", Kind: ledger.ReversalDispute, Payment: "pi_2", AmountCents: 900, Currency: "eur",
		Status: ledger.DisputeOpen, Reason: "fraudulent"})
	token, _, err := from.CreateSession(bg, alice.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := from.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: alice.ID, Key: "live:order-1", RequestID: "r1", Fingerprint: "fp"}); err != nil {
		t.Fatal(err)
	}
	if err := from.FinishIdempotent(bg, alice.ID, "live:order-1", 200); err != nil {
		t.Fatal(err)
	}
	// Two payments that credited nothing: one resolved, one open for an account that does not
	// exist.
	if _, _, err := from.RecordUnmatchedPayment(bg, ledger.UnmatchedPayment{Reference: "cs_short", Event: "evt_1", AccountID: alice.ID,
		Package: "starter", Credits: 10, AmountCents: 500, Currency: "eur", Problem: ledger.ProblemAmountMismatch, Detail: "price 900 EUR"}); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Second)
	if _, _, err := from.ResolveUnmatchedPayment(bg, "cs_short", "refunded"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := from.RecordUnmatchedPayment(bg, ledger.UnmatchedPayment{Reference: "cs_nobody", AccountID: "acct_nobodynobodynobo",
		AmountCents: 900, Currency: "eur", Problem: ledger.ProblemUnknownAccount}); err != nil {
		t.Fatal(err)
	}
	// Links: the reset link alice asked for just before the move, one bob used, one of bob's
	// that expired.
	reset := mustToken(t, from, alice.ID, ledger.TokenReset, time.Hour)
	used := mustToken(t, from, bob.ID, ledger.TokenVerify, time.Hour)
	if a, err := from.ConsumeToken(bg, ledger.TokenVerify, used); err != nil || a.ID != bob.ID {
		t.Fatalf("consume on Badger: %+v %v", a, err)
	}
	expired := mustToken(t, from, bob.ID, ledger.TokenVerify, time.Minute)
	t0 = t0.Add(time.Minute + time.Second)
	if _, err := from.PeekToken(bg, ledger.TokenVerify, expired); !errors.Is(err, ledger.ErrInvalidToken) {
		t.Fatalf("an expired token on Badger: %v", err)
	}
	t0 = t0.Add(-time.Minute - time.Second) // back to before its expiry: Badger still keeps it
	if _, err := from.PeekToken(bg, ledger.TokenVerify, expired); err != nil {
		t.Fatalf("the expired token is not stored on Badger any more (%v): the test would not show it is skipped", err)
	}
	t0 = t0.Add(time.Minute + time.Second)
	// E-mail in the outbox when the server stops: one a sender held (its lease runs on), one
	// whose first attempt failed, one not tried yet.
	leased := mustEnqueue(t, from, ledger.MailMessage{AccountID: alice.ID, Kind: "verify", Sealed: []byte("sealed verify")})
	if c, err := from.ClaimMail(bg, 10*time.Second, 1); err != nil || len(c) != 1 || c[0].ID != leased {
		t.Fatalf("claim on Badger: %+v %v", c, err)
	}
	t0 = t0.Add(time.Second)
	retried := mustEnqueue(t, from, ledger.MailMessage{AccountID: alice.ID, Kind: "reset", Sealed: []byte("sealed\x00reset\xff")})
	c, err := from.ClaimMail(bg, time.Minute, 1)
	if err != nil || len(c) != 1 || c[0].ID != retried {
		t.Fatalf("claim on Badger: %+v %v", c, err)
	}
	if err := from.RetryMail(bg, retried, c[0].Claim, t0, "421 4.7.0 try again later"); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Second)
	fresh := mustEnqueue(t, from, ledger.MailMessage{AccountID: bob.ID, Kind: "invite", Sealed: []byte("sealed invite")})
	wantMail := ledgertest.MustListMail(t, from, 0)
	if len(wantMail) != 3 {
		t.Fatalf("outbox on Badger: %+v", wantMail)
	}
	// Receipts: a retired signing key and the current one, and a generation's text digest, which
	// outlives the generation.
	rk1 := ledgertest.SampleReceiptKey(t, "rk_copy1")
	rk2 := ledgertest.SampleReceiptKey(t, "rk_copy2")
	if _, err := from.AddReceiptKey(bg, rk1, false); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Second)
	if _, err := from.AddReceiptKey(bg, rk2, true); err != nil {
		t.Fatal(err)
	}
	ledgertest.PutDigest(t, from, alice.ID, "req_copied", t0)
	// Redemption codes: one redeemed by bob, one disabled; the copy keeps the uses, who redeemed,
	// and the digests that find them.
	code, rc := ledgertest.MustCode(t, from, ledger.NewCode{Credits: 4, MaxUses: 2, Expires: t0.Add(24 * time.Hour), Note: "copied"})
	if _, err := from.Redeem(bg, bob.ID, code); err != nil {
		t.Fatal(err)
	}
	_, dc := ledgertest.MustCode(t, from, ledger.NewCode{Credits: 1})
	if _, err := from.DisableCode(bg, dc.ID); err != nil {
		t.Fatal(err)
	}
	// bob has 8 credits that expire in two days, 3 of them held by an open hold: the copy keeps
	// the lot and the hold's take.
	bobExpires := t0.Add(48 * time.Hour)
	if _, err := from.Grant(bg, ledger.GrantRequest{AccountID: bob.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 8,
		Expires: bobExpires}); err != nil {
		t.Fatal(err)
	}
	if _, err := from.Hold(bg, ledger.HoldRequest{AccountID: bob.ID, Mode: ledger.Live, RequestID: "rb", Credits: 3}); err != nil {
		t.Fatal(err)
	}
	if b := ledgertest.MustBalance(t, from, bob.ID); len(b.Expiring) != 1 || b.Expiring[0].Credits != 5 {
		t.Fatalf("bob's expiring credits before the copy: %+v", b)
	}
	// bob tops up automatically: his rule and card, one top-up that succeeded and one in flight.
	ledgertest.MustTopUpRule(t, from, bob.ID, 5, 3)
	done, err := from.BeginTopUp(bg, bob.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := from.SetTopUpPaymentIntent(bg, done.ID, "pi_copied"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := from.FinishTopUp(bg, done.ID, ledger.TopUpSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := from.BeginTopUp(bg, bob.ID); err != nil {
		t.Fatal(err)
	}
	// alice has an alert endpoint (its secret sealed as the caller gave it) and a delivery to
	// it, pending.
	ep, err := from.CreateAlertEndpoint(bg, ledger.AlertEndpoint{AccountID: alice.ID, URL: "https://hooks.example.com/textgen",
		Kinds: []string{ledger.AlertBalanceLow}, SealedSecret: []byte("sealed secret")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := from.EnqueueAlertEvent(bg, ledger.AlertEvent{AccountID: alice.ID, Kind: ledger.AlertBalanceLow, ID: "evt_copied",
		Payload: []byte(`{"id":"evt_copied"}`)}); err != nil {
		t.Fatal(err)
	}
	ledgertest.VerifyClean(t, from)

	url := pgtest.NewDatabase(t)
	to := openPostgres(t, url, pgQuiet)
	var calls [][2]int64
	if err := CopyLedger(bg, from, to, CopyOptions{Progress: func(done, total int64) {
		calls = append(calls, [2]int64{done, total})
	}}); err != nil {
		t.Fatal(err)
	}
	// Record for record, what PostgreSQL stores is what Badger exported: the API does not show
	// every field (a hold's expiry, key and tool, a session's CSRF token, a record's fingerprint).
	var want exported
	if err := from.Export(bg, &want); err != nil {
		t.Fatal(err)
	}
	if got := pgExported(t, to); !reflect.DeepEqual(got.sorted(), want.sorted()) {
		t.Errorf("stored records after the copy:\n got %+v\nwant %+v", got, want)
	}
	if len(want.alertEndpoints) != 1 || want.alertEndpoints[0].ID != ep.ID || len(want.alertDeliveries) != 1 {
		t.Errorf("exported alert endpoints %+v and deliveries %+v; want alice's one of each", want.alertEndpoints, want.alertDeliveries)
	}
	if len(want.topUpRules) != 1 || len(want.topUps) != 2 {
		t.Errorf("exported top-up rules %+v and top-ups %+v; want 1 and 2", want.topUpRules, want.topUps)
	}
	if len(want.codes) != 2 || len(want.redemptions) != 1 {
		t.Errorf("exported codes %+v and redemptions %+v; want 2 and 1", want.codes, want.redemptions)
	}
	// Of the tokens only the live one is exported (and so stored): not the used one, nor the
	// expired one, which Badger still holds (it drops it by the wall clock, a minute on).
	if len(want.mail) != 3 || len(want.tokens) != 1 || want.tokens[0].Digest != sha256.Sum256([]byte(reset)) ||
		want.tokens[0].AccountID != alice.ID || want.tokens[0].Purpose != ledger.TokenReset {
		t.Errorf("exported %d messages and the tokens %+v; want 3 and alice's reset token", len(want.mail), want.tokens)
	}
	// Progress counts from 0 to every record Badger holds: those given, and the expired token
	// it passed over.
	if n := int64(want.count()) + 1; len(calls) != 2 || calls[0] != [2]int64{0, n} || calls[1] != [2]int64{n, n} {
		t.Errorf("copy progress %v, want 0 and %d of %d records", calls, n, n)
	}
	if len(want.rkeys) != 2 || len(want.digests) != 1 {
		t.Errorf("exported the receipt keys %+v and digests %+v; want 2 and 1", want.rkeys, want.digests)
	}
	if got, want := ledgertest.MustReceiptKeys(t, to), ledgertest.MustReceiptKeys(t, from); !reflect.DeepEqual(got, want) {
		t.Errorf("receipt keys after the copy:\n got %+v\nwant %+v", got, want)
	}
	if d, err := to.ReceiptDigest(bg, alice.ID, "req_copied"); err != nil || len(d) != 32 {
		t.Errorf("the copied text digest: %x %v", d, err)
	}

	for _, a := range []ledger.Account{alice, bob} {
		if got, want := ledgertest.MustBalance(t, to, a.ID), ledgertest.MustBalance(t, from, a.ID); !reflect.DeepEqual(got, want) {
			t.Errorf("balance of %s: %+v, Badger %+v", a.Email, got, want)
		}
		if got, want := ledgertest.AllHistory(t, to, a.ID), ledgertest.AllHistory(t, from, a.ID); !reflect.DeepEqual(got, want) {
			t.Errorf("history of %s:\n got %+v\nwant %+v", a.Email, got, want)
		}
		got, _ := to.ListKeys(bg, a.ID)
		want, _ := from.ListKeys(bg, a.ID)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("keys of %s:\n got %+v\nwant %+v", a.Email, got, want)
		}
		if got, _ := to.GetAccount(bg, a.ID); got != a {
			t.Errorf("account %+v, want %+v", got, a)
		}
	}
	var lots, takes int64
	if err := to.pool.QueryRow(bg, `SELECT (SELECT count(*) FROM lots WHERE account_id = $1 AND held = 3 AND remaining = 8),
		(SELECT count(*) FROM hold_lots WHERE account_id = $1 AND request_id = 'rb' AND credits = 3)`, bob.ID).Scan(&lots, &takes); err != nil || lots != 1 || takes != 1 {
		t.Errorf("bob's lot and the open hold's take after the copy: %d %d %v", lots, takes, err)
	}
	if got, want := mustPurchases(t, to, alice.ID), mustPurchases(t, from, alice.ID); len(got) != 2 || !reflect.DeepEqual(got, want) {
		t.Errorf("purchases %+v, Badger %+v", got, want)
	}
	// The key counts r1's 3, r3's 1 and r4's 2.
	if k := ledgertest.MustKeyOf(t, to, alice.ID, lk.ID); k.Usage.Total != 6 || k.Usage.Day != 6 || k.BudgetDay != 10 || k.PreviousLast4 == "" {
		t.Errorf("the rolled key with limits after the copy: %+v", k)
	}
	for _, k := range []string{liveKey, rolledOld, testKey} {
		gk, ga, err := to.LookupKey(bg, k)
		wk, _, _ := from.LookupKey(bg, k)
		if err != nil || gk.ID != wk.ID || ga.ID != alice.ID {
			t.Errorf("lookup of an old key: %+v %+v %v", gk, ga, err)
		}
	}
	if got, want := ledgertest.MustMembers(t, to, alice.ID), ledgertest.MustMembers(t, from, alice.ID); len(got) != 3 || !reflect.DeepEqual(got, want) {
		t.Errorf("members after the copy:\n got %+v\nwant %+v", got, want)
	}
	var isOrg, bobIsOrg bool
	if err := to.pool.QueryRow(bg, `SELECT a.organisation, b.organisation FROM accounts a, accounts b WHERE a.id = $1 AND b.id = $2`,
		alice.ID, bob.ID).Scan(&isOrg, &bobIsOrg); err != nil || !isOrg || bobIsOrg {
		t.Errorf("the organisation flags after the copy: alice %v, bob %v (%v)", isOrg, bobIsOrg, err)
	}
	if gk, _, err := to.LookupKey(bg, bobsKey); err != nil || gk.MemberID != bob.ID {
		t.Errorf("bob's key after the copy: %+v %v", gk, err)
	}
	if _, _, err := to.LookupKey(bg, revoked); err != ledger.ErrInvalidKey {
		t.Errorf("a revoked key works after the copy: %v", err)
	}
	if a, err := to.Authenticate(bg, "alice@example.com", ledgertest.GoodPassword); err != nil || a.ID != alice.ID {
		t.Errorf("log-in after the copy: %+v %v", a, err)
	}
	if s, a, err := to.GetSession(bg, token); err != nil || a.ID != alice.ID || s.AccountID != alice.ID {
		t.Errorf("session after the copy: %+v %v", s, err)
	}
	if rec, isNew, err := to.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: alice.ID, Key: "live:order-1", RequestID: "r9"}); err != nil || isNew || rec.Status != 200 {
		t.Errorf("Idempotency-Key after the copy: %+v %v %v", rec, isNew, err)
	}
	// Repeats report the outcomes recorded on Badger; a reference used there credits nothing.
	if r, err := to.Settle(bg, alice.ID, "r2"); err != nil || !r.Repeated || r.State != ledger.HoldVoided {
		t.Errorf("settle of a hold voided on Badger: %+v %v", r, err)
	}
	if r, err := to.Grant(bg, ledger.GrantRequest{AccountID: alice.ID, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10, Reference: "cs_2"}); err != nil || !r.Repeated {
		t.Errorf("a purchase credited on Badger credits again: %+v %v", r, err)
	}
	// Unmatched payments: the same list, the open one still open, the resolved one resolved once.
	gotPay, err := to.UnmatchedPayments(bg, false, 0)
	wantPay, _ := from.UnmatchedPayments(bg, false, 0)
	if err != nil || len(gotPay) != 2 || !reflect.DeepEqual(gotPay, wantPay) {
		t.Errorf("unmatched payments after the copy:\n got %+v %v\nwant %+v", gotPay, err, wantPay)
	}
	if open, err := to.UnmatchedPayments(bg, true, 0); err != nil || len(open) != 1 || open[0].Reference != "cs_nobody" {
		t.Errorf("open unmatched payments after the copy: %+v %v", open, err)
	}
	if p, repeated, err := to.ResolveUnmatchedPayment(bg, "cs_short", "credited by hand"); err != nil || !repeated || p.Resolution != "refunded" {
		t.Errorf("resolving a payment resolved on Badger: %+v %v %v", p, repeated, err)
	}
	if p, repeated, err := to.RecordUnmatchedPayment(bg, ledger.UnmatchedPayment{Reference: "cs_nobody", AmountCents: 1, Currency: "usd",
		Problem: ledger.ProblemUnknownPackage}); err != nil || !repeated || p != wantPay[0] {
		t.Errorf("recording a payment recorded on Badger: %+v %v %v", p, repeated, err)
	}
	// Payments and reversals: the same; a repeated refund takes nothing, the dispute closes.
	for _, acct := range []string{alice.ID, bob.ID} {
		got, err := to.AccountPayments(bg, acct, 0)
		want, _ := from.AccountPayments(bg, acct, 0)
		if err != nil || len(got) == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("payments of %s after the copy:\n got %+v %v\nwant %+v", acct, got, err, want)
		}
	}
	gotRev, err := to.ListReversals(bg, "", "", 0)
	wantRev, _ := from.ListReversals(bg, "", "", 0)
	if err != nil || len(gotRev) != 2 || !reflect.DeepEqual(gotRev, wantRev) {
		t.Errorf("reversals after the copy:\n got %+v %v\nwant %+v", gotRev, err, wantRev)
	}
	if r, err := to.Reverse(bg, ledger.ReversalRequest{ID: "re_1", Kind: ledger.ReversalRefund, Payment: "pi_1", AmountCents: 900, Status: ledger.RefundApplied}); err != nil || !r.Repeated {
		t.Errorf("a refund applied on Badger applies again: %+v %v", r, err)
	}
	if b, _ := to.Balance(bg, alice.ID); b.Balance != 20-3-1-20 || b.Available != 20-3-1-20-2 { // r1 (3) and bob's r5 settled, r4 (2) open
		t.Errorf("alice's debt after the copy: %+v", b)
	}
	rep := ledgertest.VerifyClean(t, to)
	if r, err := to.Reverse(bg, ledger.ReversalRequest{ID: "du_2", Kind: ledger.ReversalDispute, Payment: "pi_2", AmountCents: 900, Status: ledger.DisputeWon}); err != nil || r.Entry.Amount != 10 {
		t.Errorf("the dispute copied open, won: %+v %v", r, err)
	}
	ledgertest.VerifyClean(t, to)
	if want, _ := from.Verify(bg); rep.Accounts != want.Accounts || rep.Entries != want.Entries {
		t.Errorf("verify counts %d accounts / %d entries, Badger %d / %d", rep.Accounts, rep.Entries, want.Accounts, want.Entries)
	}
	// The copy goes on: the hold left open on Badger settles on PostgreSQL.
	if r, err := to.Settle(bg, alice.ID, "r4"); err != nil || r.Repeated || r.State != ledger.HoldSettled {
		t.Errorf("settle of the open hold after the copy: %+v %v", r, err)
	}
	// A copied code: bob redeemed it, carol may, once.
	_, err = to.Redeem(bg, bob.ID, code)
	ledgertest.WantErr(t, err, ledger.ErrAlreadyRedeemed)
	if r, err := to.Redeem(bg, carol.ID, code); err != nil || r.Code.Uses != 2 || r.Code.ID != rc.ID {
		t.Fatalf("redeeming the copied code: %+v %v", r, err)
	}
	ledgertest.VerifyClean(t, to)

	// Links sent before the move work on PostgreSQL, once, for their purpose only; a used or
	// expired one does not.
	if _, err := to.ConsumeToken(bg, ledger.TokenVerify, reset); !errors.Is(err, ledger.ErrInvalidToken) {
		t.Errorf("a reset token used as a verify token after the copy: %v", err)
	}
	if a, err := to.ConsumeToken(bg, ledger.TokenReset, reset); err != nil || a.ID != alice.ID {
		t.Errorf("the reset link after the copy: %+v %v", a, err)
	}
	if _, err := to.ConsumeToken(bg, ledger.TokenReset, reset); !errors.Is(err, ledger.ErrInvalidToken) {
		t.Errorf("the reset link used twice after the copy: %v", err)
	}
	for name, tok := range map[string]string{"used": used, "expired": expired} {
		if _, err := to.ConsumeToken(bg, ledger.TokenVerify, tok); !errors.Is(err, ledger.ErrInvalidToken) {
			t.Errorf("the %s link after the copy: %v", name, err)
		}
	}
	// Queued e-mail: the same outbox, and a sender on PostgreSQL takes the due messages with the
	// sealed bytes, kind, account, attempts and last error they had, counting one more attempt.
	if got := ledgertest.MustListMail(t, to, 0); !reflect.DeepEqual(got, wantMail) {
		t.Errorf("outbox after the copy:\n got %+v\nwant %+v", got, wantMail)
	}
	type sent struct {
		AccountID, Kind, Sealed, LastError string
		Attempts                           int
	}
	claimAll := func() map[string]sent {
		t.Helper()
		ms, err := to.ClaimMail(bg, time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]sent{}
		for _, m := range ms {
			out[m.ID] = sent{m.AccountID, m.Kind, string(m.Sealed), m.LastError, m.Attempts}
			if err := to.MarkMailSent(bg, m.ID, m.Claim); err != nil {
				t.Errorf("marking %s sent after the copy: %v", m.ID, err)
			}
		}
		return out
	}
	if got, want := claimAll(), map[string]sent{
		retried: {alice.ID, "reset", "sealed\x00reset\xff", "421 4.7.0 try again later", 2},
		fresh:   {bob.ID, "invite", "sealed invite", "", 1},
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("claimed after the copy:\n got %+v\nwant %+v", got, want)
	}
	// The one a sender held on Badger is taken once its lease has run out.
	t0 = t0.Add(10 * time.Second)
	if got, want := claimAll(), map[string]sent{leased: {alice.ID, "verify", "sealed verify", "", 2}}; !reflect.DeepEqual(got, want) {
		t.Errorf("claimed after the lease of Badger's sender:\n got %+v\nwant %+v", got, want)
	}
	if got := ledgertest.MustListMail(t, to, 0); len(got) != 0 {
		t.Errorf("outbox after sending everything: %+v", got)
	}

	// The target is not empty any more.
	if err := CopyLedger(bg, from, to, CopyOptions{}); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Errorf("a copy into a used database: %v", err)
	}
	if err := CopyLedger(bg, to, openPostgres(t, pgtest.NewDatabase(t), pgQuiet), CopyOptions{}); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Errorf("a copy from a store that cannot export: %v", err)
	}
}

func mustEnqueue(t *testing.T, s ledger.Mail, m ledger.MailMessage) string {
	t.Helper()
	id, err := s.EnqueueMail(bg, m)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustToken(t *testing.T, s ledger.Mail, acct string, p ledger.TokenPurpose, ttl time.Duration) string {
	t.Helper()
	tok, err := s.CreateToken(bg, acct, p, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func mustPurchases(t *testing.T, s ledger.Store, acct string) []ledger.Entry {
	t.Helper()
	ps, err := s.Purchases(bg, acct, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// exported is every record of a ledger, as Export gives them (an ExportSink that keeps them).
type exported struct {
	accounts        []ledger.ExportAccount
	keys            []ledger.ExportKey
	holds           []ledger.ExportHold
	entries         []ledger.Entry
	credentials     []ledger.ExportCredential
	sessions        []ledger.ExportSession
	idempotency     []ledger.IdempotencyRecord
	payments        []ledger.UnmatchedPayment
	paid            []ledger.Payment
	reversals       []ledger.Reversal
	mail            []ledger.MailMessage
	tokens          []ledger.ExportToken
	rkeys           []ledger.ReceiptKey
	digests         []ledger.ReceiptDigestRecord
	members         []ledger.Membership
	usage           []ledger.ExportMemberUsage
	operators       []ledger.ExportOperator
	audit           []ledger.AuditRecord
	codes           []ledger.ExportCode
	redemptions     []ledger.CodeRedemption
	topUpRules      []ledger.TopUpRule
	topUps          []ledger.TopUp
	alertEndpoints  []ledger.AlertEndpoint
	alertDeliveries []ledger.AlertDelivery
}

func (x *exported) AlertEndpoint(e ledger.AlertEndpoint) error {
	x.alertEndpoints = append(x.alertEndpoints, e)
	return nil
}
func (x *exported) AlertDelivery(d ledger.AlertDelivery) error {
	x.alertDeliveries = append(x.alertDeliveries, d)
	return nil
}

func (x *exported) TopUpRule(r ledger.TopUpRule) error {
	x.topUpRules = append(x.topUpRules, r)
	return nil
}
func (x *exported) TopUp(t ledger.TopUp) error { x.topUps = append(x.topUps, t); return nil }

func (x *exported) Membership(m ledger.Membership) error {
	x.members = append(x.members, m)
	return nil
}
func (x *exported) MemberUsage(u ledger.ExportMemberUsage) error {
	x.usage = append(x.usage, u)
	return nil
}

func (x *exported) Account(a ledger.ExportAccount) error {
	x.accounts = append(x.accounts, a)
	return nil
}
func (x *exported) Key(k ledger.ExportKey) error   { x.keys = append(x.keys, k); return nil }
func (x *exported) Hold(h ledger.ExportHold) error { x.holds = append(x.holds, h); return nil }
func (x *exported) Entry(e ledger.Entry) error     { x.entries = append(x.entries, e); return nil }
func (x *exported) Credential(c ledger.ExportCredential) error {
	x.credentials = append(x.credentials, c)
	return nil
}
func (x *exported) Session(s ledger.ExportSession) error {
	x.sessions = append(x.sessions, s)
	return nil
}
func (x *exported) Idempotency(r ledger.IdempotencyRecord) error {
	x.idempotency = append(x.idempotency, r)
	return nil
}
func (x *exported) UnmatchedPayment(p ledger.UnmatchedPayment) error {
	x.payments = append(x.payments, p)
	return nil
}
func (x *exported) Payment(p ledger.Payment) error { x.paid = append(x.paid, p); return nil }
func (x *exported) Reversal(r ledger.Reversal) error {
	x.reversals = append(x.reversals, r)
	return nil
}
func (x *exported) Mail(m ledger.MailMessage) error      { x.mail = append(x.mail, m); return nil }
func (x *exported) Token(t ledger.ExportToken) error     { x.tokens = append(x.tokens, t); return nil }
func (x *exported) ReceiptKey(k ledger.ReceiptKey) error { x.rkeys = append(x.rkeys, k); return nil }
func (x *exported) ReceiptDigest(d ledger.ReceiptDigestRecord) error {
	x.digests = append(x.digests, d)
	return nil
}
func (x *exported) Operator(o ledger.ExportOperator) error {
	x.operators = append(x.operators, o)
	return nil
}
func (x *exported) Audit(r ledger.AuditRecord) error { x.audit = append(x.audit, r); return nil }
func (x *exported) Code(c ledger.ExportCode) error   { x.codes = append(x.codes, c); return nil }
func (x *exported) CodeRedemption(r ledger.CodeRedemption) error {
	x.redemptions = append(x.redemptions, r)
	return nil
}

// sorted is x with every list in one order (by its printed form), whatever order the engine
// gave or stored them in.
func (x exported) sorted() exported {
	by := func(a, b any) int { return cmp.Compare(fmt.Sprintf("%+v", a), fmt.Sprintf("%+v", b)) }
	slices.SortFunc(x.accounts, func(a, b ledger.ExportAccount) int { return by(a, b) })
	slices.SortFunc(x.keys, func(a, b ledger.ExportKey) int { return by(a, b) })
	slices.SortFunc(x.holds, func(a, b ledger.ExportHold) int { return by(a, b) })
	slices.SortFunc(x.entries, func(a, b ledger.Entry) int { return by(a, b) })
	slices.SortFunc(x.credentials, func(a, b ledger.ExportCredential) int { return by(a, b) })
	slices.SortFunc(x.sessions, func(a, b ledger.ExportSession) int { return by(a, b) })
	slices.SortFunc(x.idempotency, func(a, b ledger.IdempotencyRecord) int { return by(a, b) })
	slices.SortFunc(x.payments, func(a, b ledger.UnmatchedPayment) int { return by(a, b) })
	slices.SortFunc(x.paid, func(a, b ledger.Payment) int { return by(a, b) })
	slices.SortFunc(x.reversals, func(a, b ledger.Reversal) int { return by(a, b) })
	slices.SortFunc(x.mail, func(a, b ledger.MailMessage) int { return by(a, b) })
	slices.SortFunc(x.tokens, func(a, b ledger.ExportToken) int { return by(a, b) })
	slices.SortFunc(x.rkeys, func(a, b ledger.ReceiptKey) int { return by(a, b) })
	slices.SortFunc(x.digests, func(a, b ledger.ReceiptDigestRecord) int { return by(a, b) })
	slices.SortFunc(x.members, func(a, b ledger.Membership) int { return by(a, b) })
	slices.SortFunc(x.usage, func(a, b ledger.ExportMemberUsage) int { return by(a, b) })
	slices.SortFunc(x.codes, func(a, b ledger.ExportCode) int { return by(a, b) })
	slices.SortFunc(x.topUpRules, func(a, b ledger.TopUpRule) int { return by(a, b) })
	slices.SortFunc(x.topUps, func(a, b ledger.TopUp) int { return by(a, b) })
	slices.SortFunc(x.alertEndpoints, func(a, b ledger.AlertEndpoint) int { return by(a, b) })
	slices.SortFunc(x.alertDeliveries, func(a, b ledger.AlertDelivery) int { return by(a, b) })
	slices.SortFunc(x.redemptions, func(a, b ledger.CodeRedemption) int { return by(a, b) })
	return x
}

// pgExported reads every record of a PostgreSQL ledger back into Export's types.
func pgExported(t *testing.T, s *Postgres) exported {
	t.Helper()
	var x exported
	each := func(sql string, dest []any, row func()) {
		t.Helper()
		rows, _ := s.pool.Query(bg, sql)
		if _, err := pgx.ForEachRow(rows, dest, func() error { row(); return nil }); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var a ledger.ExportAccount
	var ar accountRow
	each(`SELECT `+pgAccountCols+`, balance, held, test_balance, test_held, next_seq FROM accounts`,
		append(ar.dest(), &a.Balance, &a.Held, &a.TestBalance, &a.TestHeld, &a.NextSeq), func() {
			a.Account = ar.account()
			x.accounts = append(x.accounts, a)
		})
	var kr keyRow
	var digest, prev []byte
	each(`SELECT `+pgKeyCols+`, k.digest, k.prev_digest`+pgKeyFrom, append(kr.dest(), &digest, &prev), func() {
		ek := ledger.ExportKey{Key: kr.key(), Digest: [32]byte(digest)}
		if prev != nil {
			ek.PrevDigest = [32]byte(prev)
		}
		x.keys = append(x.keys, ek)
	})
	var h ledger.ExportHold
	var created, expires int64
	var resolved, resolveSeq *int64
	each(`SELECT account_id, request_id, mode, state, key_id, tool, created, expires, hold_seq, resolved, resolve_seq, reason, credits FROM holds`,
		[]any{&h.AccountID, &h.RequestID, &h.Mode, &h.State, &h.KeyID, &h.Tool, &created, &expires, &h.HoldSeq, &resolved, &resolveSeq, &h.Reason, &h.Credits},
		func() {
			c := h
			c.Created, c.Expires, c.Resolved = pgTime(created), pgTime(expires), pgTimeOrZero(resolved)
			if resolveSeq != nil {
				c.ResolveSeq = uint64(*resolveSeq)
			}
			x.holds = append(x.holds, c)
		})
	// The lots of each account and the takes of each open hold (migrations/00018).
	for i := range x.accounts {
		lots, err := s.lotsOf(bg, s.pool, x.accounts[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(lots) > 0 {
			x.accounts[i].Lots = lots
		}
	}
	var take ledger.LotTake
	var takeAcct, takeRid string
	each(`SELECT account_id, request_id, seq, credits FROM hold_lots ORDER BY account_id, request_id, seq`,
		[]any{&takeAcct, &takeRid, &take.Seq, &take.Credits}, func() {
			for i := range x.holds {
				if x.holds[i].AccountID == takeAcct && x.holds[i].RequestID == takeRid {
					x.holds[i].Lots = append(x.holds[i].Lots, take)
				}
			}
		})
	var er entryRow
	each(`SELECT `+pgList("", pgEntryCols, false)+` FROM entries`, er.dest(), func() { x.entries = append(x.entries, er.entry()) })
	var c ledger.ExportCredential
	var updated int64
	each(`SELECT account_id, hash, updated FROM credentials`, []any{&c.AccountID, &c.Hash, &updated}, func() {
		c.Updated = pgTime(updated)
		x.credentials = append(x.credentials, c)
	})
	var ss ledger.ExportSession
	each(`SELECT digest, account_id, created, expires, csrf_token FROM sessions`,
		[]any{&digest, &ss.AccountID, &created, &expires, &ss.CSRFToken}, func() {
			ss.Digest, ss.Created, ss.Expires = [32]byte(digest), pgTime(created), pgTime(expires)
			x.sessions = append(x.sessions, ss)
		})
	var ir idemRow
	each(`SELECT `+pgIdemCols+` FROM idempotency`, ir.dest(), func() { x.idempotency = append(x.idempotency, ir.record()) })
	var pr paymentRow
	each(`SELECT `+pgPaymentCols+` FROM unmatched_payments`, pr.dest(), func() {
		p := pr.p
		p.Created, p.Resolved = pgTime(pr.created), pgTimeOrZero(pr.resolved)
		x.payments = append(x.payments, p)
	})
	rows, _ := s.pool.Query(bg, `SELECT `+pgPayCols+` FROM payments`)
	paid, err := pgx.CollectRows(rows, scanPay)
	if err != nil {
		t.Fatal(err)
	}
	x.paid = paid
	rows, _ = s.pool.Query(bg, `SELECT `+pgReversalCols+` FROM reversals`)
	if x.reversals, err = pgx.CollectRows(rows, scanReversal); err != nil {
		t.Fatal(err)
	}
	var or outboxRow
	each(`SELECT `+pgOutboxCols+` FROM mail_outbox`, or.dest(), func() {
		or.m.LeaseUntil = time.Time{}
		x.mail = append(x.mail, or.message())
	})
	var tk ledger.ExportToken
	each(`SELECT digest, account_id, purpose, expires FROM account_tokens`, []any{&digest, &tk.AccountID, &tk.Purpose, &expires}, func() {
		tk.Digest, tk.Expires = [32]byte(digest), pgTime(expires)
		x.tokens = append(x.tokens, tk)
	})
	rows, _ = s.pool.Query(bg, `SELECT `+pgReceiptKeyCols+` FROM receipt_keys`)
	if x.rkeys, err = pgx.CollectRows(rows, scanReceiptKey); err != nil {
		t.Fatal(err)
	}
	var d ledger.ReceiptDigestRecord
	each(`SELECT account_id, request_id, sha256 FROM receipt_digests`, []any{&d.AccountID, &d.RequestID, &d.SHA256}, func() {
		x.digests = append(x.digests, ledger.ReceiptDigestRecord{AccountID: d.AccountID, RequestID: d.RequestID, SHA256: slices.Clone(d.SHA256)})
	})
	var m ledger.Membership
	each(`SELECT org_id, member_id, role, monthly_cap, pending, created FROM memberships`,
		[]any{&m.OrgID, &m.MemberID, &m.Role, &m.MonthlyCap, &m.Pending, &created}, func() {
			m.Created = pgTime(created)
			x.members = append(x.members, m)
		})
	var u ledger.ExportMemberUsage
	each(`SELECT org_id, member_id, month, used FROM member_usage`, []any{&u.OrgID, &u.MemberID, &u.Month, &u.Credits},
		func() { x.usage = append(x.usage, u) })
	rows, _ = s.pool.Query(bg, `SELECT digest, `+pgCodeCols+` FROM redemption_codes`)
	codes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.ExportCode, error) {
		var c ledger.ExportCode
		var created int64
		var exp, dis *int64
		err := row.Scan(&digest, &c.ID, &c.Last4, &c.Credits, &c.MaxUses, &c.Uses, &exp, &c.Note, &created, &dis)
		c.Digest, c.Created, c.Expires, c.Disabled = [32]byte(digest), pgTime(created), pgTimeOrZero(exp), pgTimeOrZero(dis)
		return c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	x.codes = codes
	var cr ledger.CodeRedemption
	var seq int64
	each(`SELECT code_id, account_id, credits, seq, at FROM code_redemptions`, []any{&cr.CodeID, &cr.AccountID, &cr.Credits, &seq, &created},
		func() {
			cr.Seq, cr.Time = uint64(seq), pgTime(created)
			x.redemptions = append(x.redemptions, cr)
		})
	rows, _ = s.pool.Query(bg, `SELECT `+pgRuleCols+` FROM topup_rules`)
	if x.topUpRules, err = pgx.CollectRows(rows, scanRule); err != nil {
		t.Fatal(err)
	}
	rows, _ = s.pool.Query(bg, `SELECT `+pgTopUpCols+` FROM topups`)
	if x.topUps, err = pgx.CollectRows(rows, scanTopUp); err != nil {
		t.Fatal(err)
	}
	rows, _ = s.pool.Query(bg, `SELECT id, account_id, url, kinds, sealed_secret, created FROM alert_endpoints`)
	if x.alertEndpoints, err = pgx.CollectRows(rows, scanAlertEndpoint); err != nil {
		t.Fatal(err)
	}
	rows, _ = s.pool.Query(bg, `SELECT `+pgAlertCols+` FROM alert_deliveries d`)
	if x.alertDeliveries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.AlertDelivery, error) {
		var r alertRow
		err := row.Scan(r.dest()...)
		return r.delivery(), err
	}); err != nil {
		t.Fatal(err)
	}
	return x
}

// count is how many records were given.
func (x *exported) count() int {
	v := reflect.ValueOf(x).Elem()
	n := 0
	for i := range v.NumField() {
		n += v.Field(i).Len()
	}
	return n
}

// Badger's export gives each account its own lots (credits that expire), read beside the
// accounts in one walk: accounts with and without lots, in whatever order their ids fall.
func TestExportLotsPerAccount(t *testing.T) {
	t0 := time.Date(2030, 7, 1, 10, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	from := openBadger(t, t.TempDir())
	want := map[string][]int64{} // account -> the amounts of its lots
	for i := range 12 {
		a := ledgertest.MustAccount(t, from, fmt.Sprintf("lots%d@example.com", i))
		want[a.ID] = nil
		for j := range i % 3 { // 0, 1 or 2 lots
			credits := int64(10*i + j + 1)
			if _, err := from.Grant(bg, ledger.GrantRequest{AccountID: a.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: credits,
				Expires: t0.Add(time.Duration(j+1) * time.Hour)}); err != nil {
				t.Fatal(err)
			}
			want[a.ID] = append(want[a.ID], credits)
		}
	}
	var x exported
	if err := from.Export(bg, &x); err != nil {
		t.Fatal(err)
	}
	if len(x.accounts) != len(want) {
		t.Fatalf("%d accounts exported, want %d", len(x.accounts), len(want))
	}
	for _, a := range x.accounts {
		var got []int64
		for _, l := range a.Lots {
			got = append(got, l.Amount)
		}
		if !slices.Equal(got, want[a.ID]) {
			t.Errorf("account %s: lots %v, want %v", a.ID, got, want[a.ID])
		}
	}
}
