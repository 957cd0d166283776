package ledger

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const goodPassword = "correct horse battery"

func TestPasswordHashFormatAndVerify(t *testing.T) {
	h, err := HashPassword(goodPassword)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q is not a PHC argon2id string with the default parameters", h)
	}
	h2, _ := HashPassword(goodPassword)
	if h == h2 {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
	for pw, want := range map[string]bool{goodPassword: true, "correct horse battery ": false, "": false} {
		ok, err := VerifyPassword(h, pw)
		if err != nil || ok != want {
			t.Errorf("VerifyPassword(%q) = %v, %v; want %v", pw, ok, err, want)
		}
	}
	// Stored parameters are honoured, so the defaults can change later.
	weak, err := hashPassword(goodPassword, Argon2Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 8, KeyLen: 16})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := VerifyPassword(weak, goodPassword); !ok || err != nil {
		t.Fatalf("hash with other parameters: %v, %v", ok, err)
	}
	for _, bad := range []string{
		"", "plain", "$argon2i$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
		"$argon2id$v=19$m=99999999,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", // memory bomb
		"$argon2id$v=19$m=19456,t=99,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
		"$argon2id$v=19$m=19456,t=2,p=1$!!$aGFzaGhhc2hoYXNoaGFzaA",
	} {
		if _, err := VerifyPassword(bad, goodPassword); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("VerifyPassword(%q): err %v, want ErrInvalidArgument", bad, err)
		}
	}
}

func TestPasswordPolicy(t *testing.T) {
	for _, c := range []struct {
		email, pw string
		ok        bool
	}{
		{"a@example.com", goodPassword, true},
		{"a@example.com", "short", false},
		{"a@example.com", "123456789", false},
		{"a@example.com", "ünïcödé-pä", true}, // 10 characters, more bytes
		{"a@example.com", strings.Repeat("x", MaxPasswordLen+1), false},
		{"a@example.com", strings.Repeat("z", 12), false},
		{"a@example.com", "Password1234", false},
		{"longname@example.com", "longname@example.com", false},
		{"longername@example.com", "LongerName", false},
		{"a@example.com", "pass\xffword123", false},
	} {
		err := CheckPasswordPolicy(c.email, c.pw)
		if (err == nil) != c.ok {
			t.Errorf("CheckPasswordPolicy(%q, %q) = %v, want ok=%v", c.email, c.pw, err, c.ok)
		}
		var we *WeakPasswordError
		if err != nil && (!errors.Is(err, ErrWeakPassword) || !errors.As(err, &we) || we.Reason == "") {
			t.Errorf("CheckPasswordPolicy(%q): %v is not a WeakPasswordError", c.pw, err)
		}
	}
}

func TestSignUpAndAuthenticate(t *testing.T) {
	s := newMem(t)
	a, err := s.CreateAccountWithPassword(bg, " Alice@Example.com ", goodPassword)
	if err != nil {
		t.Fatal(err)
	}
	if a.Email != "alice@example.com" || a.Status != StatusActive {
		t.Fatalf("account %+v", a)
	}
	if _, err := s.CreateAccountWithPassword(bg, "ALICE@example.com", goodPassword); !errors.Is(err, ErrDuplicateEmail) {
		t.Fatalf("duplicate sign-up: %v", err)
	}
	if _, err := s.CreateAccountWithPassword(bg, "bob@example.com", "short"); !errors.Is(err, ErrWeakPassword) {
		t.Fatalf("weak password: %v", err)
	}
	if _, err := s.GetAccountByEmail(bg, "bob@example.com"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused sign-up created an account: %v", err)
	}
	if _, err := s.CreateAccountWithPassword(bg, "not an email", goodPassword); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad email: %v", err)
	}

	got, err := s.Authenticate(bg, "alice@EXAMPLE.com", goodPassword)
	if err != nil || got.ID != a.ID {
		t.Fatalf("Authenticate: %+v, %v", got, err)
	}
	// Wrong password, unknown email, an operator-made account without password, an absurdly
	// long password: one error, no hint which.
	opAcct := mustAccount(t, s, "operator-made@example.com")
	for _, c := range [][2]string{
		{"alice@example.com", "wrong password!"},
		{"nobody@example.com", goodPassword},
		{opAcct.Email, goodPassword},
		{"alice@example.com", strings.Repeat("a", MaxPasswordLen+1)},
	} {
		if _, err := s.Authenticate(bg, c[0], c[1]); err != ErrInvalidCredentials {
			t.Errorf("Authenticate(%q, %q) = %v, want ErrInvalidCredentials", c[0], c[1], err)
		}
	}

	// The operator's account gets a password; a disabled account is refused after the check.
	if err := s.SetPassword(bg, opAcct.ID, "short"); !errors.Is(err, ErrWeakPassword) {
		t.Fatalf("SetPassword weak: %v", err)
	}
	if err := s.SetPassword(bg, opAcct.ID, goodPassword+"!"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(bg, opAcct.Email, goodPassword+"!"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetAccountStatus(bg, a.ID, StatusDisabled); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Authenticate(bg, a.Email, goodPassword); !errors.Is(err, ErrAccountDisabled) || got.ID != a.ID {
		t.Fatalf("disabled: %+v, %v", got, err)
	}
	if _, err := s.Authenticate(bg, a.Email, "wrong password!"); err != ErrInvalidCredentials {
		t.Fatalf("disabled, wrong password: %v", err)
	}
}

// countArgon2 counts the argon2id computations of the package until the test ends. Set it only
// while nothing else hashes: the counter is shared.
func countArgon2(t *testing.T) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	old := argon2Key
	argon2Key = func(password, salt []byte, passes, memory uint32, threads uint8, keyLen uint32) []byte {
		n.Add(1)
		return old(password, salt, passes, memory, threads, keyLen)
	}
	t.Cleanup(func() { argon2Key = old })
	return &n
}

// TestAuthenticateTiming checks that an unknown email and an account without a password cost
// the same argon2id work as a wrong (or the right) password, so that the time of the answer does
// not tell whether an email has an account. It counts hash computations instead of timing them:
// timings on a loaded machine are noise, a count is exact.
func TestAuthenticateTiming(t *testing.T) {
	s := newMem(t)
	if _, err := s.CreateAccountWithPassword(bg, "timing@example.com", goodPassword); err != nil {
		t.Fatal(err)
	}
	mustAccount(t, s, "no-password@example.com")
	cases := []struct {
		name, email, password string
		want                  error
	}{
		{"right password", "timing@example.com", goodPassword, nil},
		{"wrong password", "timing@example.com", "wrong password!", ErrInvalidCredentials},
		{"unknown email", "nobody@example.com", "wrong password!", ErrInvalidCredentials},
		{"no password set", "no-password@example.com", "wrong password!", ErrInvalidCredentials},
	}
	// The first failure without a real hash computes the dummy hash once per process; that
	// one-time hash is not part of any answer after it.
	for _, c := range cases {
		_, _ = s.Authenticate(bg, c.email, c.password)
	}
	calls := countArgon2(t)
	counts := map[string]int64{}
	for _, c := range cases {
		before := calls.Load()
		if _, err := s.Authenticate(bg, c.email, c.password); err != c.want {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
		counts[c.name] = calls.Load() - before
	}
	for _, c := range cases {
		if counts[c.name] != 1 {
			t.Fatalf("argon2id computations per answer %v: every answer must cost exactly one, or they can be told apart", counts)
		}
	}
}

func TestSessions(t *testing.T) {
	s := newMem(t)
	clock := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	setNow(t, &clock)
	a, err := s.CreateAccountWithPassword(bg, "sess@example.com", goodPassword)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateSession(bg, a.ID, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("ttl 0: %v", err)
	}
	if _, _, err := s.CreateSession(bg, "acct_nonexistent00000", time.Hour); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown account: %v", err)
	}
	tok, sess, err := s.CreateSession(bg, a.ID, 12*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != sessionTokenLen || sess.AccountID != a.ID || len(sess.CSRFToken) != csrfTokenLen ||
		!sess.Expires.Equal(clock.Add(12*time.Hour)) || !strings.HasPrefix(sess.ID, "ses_") {
		t.Fatalf("session %+v token %q", sess, tok)
	}
	tok2, sess2, _ := s.CreateSession(bg, a.ID, 12*time.Hour)
	if tok2 == tok || sess2.CSRFToken == sess.CSRFToken {
		t.Fatal("two sessions share a token or CSRF secret")
	}
	got, acct, err := s.GetSession(bg, tok)
	if err != nil || got != sess || acct.ID != a.ID {
		t.Fatalf("GetSession: %+v %+v %v", got, acct, err)
	}
	for _, bad := range []string{"", "x", tok[:len(tok)-1] + "!", strings.Repeat("A", sessionTokenLen)} {
		if _, _, err := s.GetSession(bg, bad); err != ErrInvalidSession {
			t.Errorf("GetSession(%q): %v", bad, err)
		}
	}
	// The token itself is never stored: no stored value or key contains it.
	assertNotStored(t, s, tok)

	// Expiry follows the ledger clock.
	clock = clock.Add(12*time.Hour - time.Second)
	if _, _, err := s.GetSession(bg, tok); err != nil {
		t.Fatalf("a second before expiry: %v", err)
	}
	clock = clock.Add(time.Second)
	if _, _, err := s.GetSession(bg, tok); err != ErrInvalidSession {
		t.Fatalf("at expiry: %v", err)
	}

	// Log-out ends one session; a password change ends them all.
	clock = clock.Add(-time.Hour)
	if err := s.DeleteSession(bg, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(bg, tok); err != nil {
		t.Fatalf("second DeleteSession: %v", err)
	}
	if _, _, err := s.GetSession(bg, tok); err != ErrInvalidSession {
		t.Fatalf("after log-out: %v", err)
	}
	if _, _, err := s.GetSession(bg, tok2); err != nil {
		t.Fatalf("the other session: %v", err)
	}
	if err := s.SetPassword(bg, a.ID, "another good password"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetSession(bg, tok2); err != ErrInvalidSession {
		t.Fatalf("after password change: %v", err)
	}

	// No sessions for a disabled account.
	if _, err := s.SetAccountStatus(bg, a.ID, StatusDisabled); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateSession(bg, a.ID, time.Hour); !errors.Is(err, ErrAccountDisabled) {
		t.Fatalf("disabled: %v", err)
	}
}

func assertNotStored(t *testing.T, s *Badger, secret string) {
	t.Helper()
	var buf strings.Builder
	if err := s.Backup(bg, &buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), secret) {
		t.Fatalf("the secret %q is stored in the ledger", secret)
	}
}

func TestSessionsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateAccountWithPassword(bg, "reopen@example.com", goodPassword)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := s.CreateSession(bg, a.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, quiet)
	if _, err := s.Authenticate(bg, "reopen@example.com", goodPassword); err != nil {
		t.Fatalf("password after reopen: %v", err)
	}
	if _, acct, err := s.GetSession(bg, tok); err != nil || acct.ID != a.ID {
		t.Fatalf("session after reopen: %v", err)
	}
	rep, err := s.Verify(bg)
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

func TestPurchasesIdempotentOnReference(t *testing.T) {
	s := newMem(t)
	a := mustAccount(t, s, "buyer@example.com")
	buy := func(ref string) GrantResult {
		t.Helper()
		r, err := s.Grant(bg, GrantRequest{AccountID: a.ID, Mode: Live, Kind: KindPurchase, Credits: 10,
			Reference: ref, AmountCents: 200, Currency: "EUR"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := buy("cs_test_1")
	replay := buy("cs_test_1")
	if first.Repeated || !replay.Repeated || replay.Entry.Seq != first.Entry.Seq || replay.Balance.Balance != 10 {
		t.Fatalf("replayed purchase: first %+v, replay %+v", first, replay)
	}
	buy("cs_test_2")
	mustGrant(t, s, a.ID, Live, 5) // no reference: not a purchase
	if _, err := s.Grant(bg, GrantRequest{AccountID: a.ID, Mode: Live, Kind: KindGrant, Credits: 1, Reference: "INV-1"}); err != nil {
		t.Fatal(err)
	}
	mustHold(t, s, a.ID, Live, "req_1")
	if _, err := s.Settle(bg, a.ID, "req_1"); err != nil {
		t.Fatal(err)
	}
	ps, err := s.Purchases(bg, a.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Reference != "cs_test_2" || ps[1].Reference != "cs_test_1" ||
		ps[0].AmountCents != 200 || ps[0].Currency != "EUR" || ps[0].Amount != 10 {
		t.Fatalf("purchases %+v", ps)
	}
	if ps, _ := s.Purchases(bg, a.ID, 1); len(ps) != 1 || ps[0].Reference != "cs_test_2" {
		t.Fatalf("limit 1: %+v", ps)
	}
	if b := mustBalance(t, s, a.ID); b.Balance != 10+10+5+1-1 {
		t.Fatalf("balance %+v", b)
	}
	if _, err := s.Purchases(bg, "acct_nonexistent00000", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown account: %v", err)
	}
}

func TestRefillTestCredits(t *testing.T) {
	s := newMem(t)
	a := mustAccount(t, s, "tester@example.com")
	n, b, err := s.RefillTestCredits(bg, a.ID, 50)
	if err != nil || n != 50 || b.TestAvailable != 50 || b.Balance != 0 {
		t.Fatalf("first refill: %d %+v %v", n, b, err)
	}
	if n, _, _ := s.RefillTestCredits(bg, a.ID, 50); n != 0 {
		t.Fatalf("refill when full granted %d", n)
	}
	mustHold(t, s, a.ID, Test, "req_a")
	mustHold(t, s, a.ID, Test, "req_b")
	if _, err := s.Settle(bg, a.ID, "req_a"); err != nil {
		t.Fatal(err)
	}
	// 49 balance, one open hold: 48 available, a refill adds 2.
	n, b, err = s.RefillTestCredits(bg, a.ID, 50)
	if err != nil || n != 2 || b.TestAvailable != 50 {
		t.Fatalf("second refill: %d %+v %v", n, b, err)
	}
	// Concurrent refills never overshoot.
	if _, err := s.Void(bg, a.ID, "req_b", "test"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, _, err := s.RefillTestCredits(bg, a.ID, 60); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if b := mustBalance(t, s, a.ID); b.TestAvailable != 60 || b.Available != 0 {
		t.Fatalf("after concurrent refills: %+v", b)
	}
	if ps, _ := s.Purchases(bg, a.ID, 0); len(ps) != 0 {
		t.Fatalf("a refill is listed as a purchase: %+v", ps)
	}
	rep, err := s.Verify(bg)
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	if _, _, err := s.RefillTestCredits(bg, a.ID, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("target 0: %v", err)
	}
}

func TestSignUpConcurrentSameEmail(t *testing.T) {
	s := newMem(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, dup := 0, 0
	for i := range 4 {
		wg.Go(func() {
			_, err := s.CreateAccountWithPassword(bg, "race@example.com", fmt.Sprintf("%s %d", goodPassword, i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, ErrDuplicateEmail):
				dup++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if created != 1 || dup != 3 {
		t.Fatalf("created %d, duplicates %d", created, dup)
	}
}
