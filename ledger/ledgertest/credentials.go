package ledgertest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

func testSignUpAndAuthenticate(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a, err := s.CreateAccountWithPassword(bg, " Alice@Example.com ", GoodPassword)
	if err != nil {
		t.Fatal(err)
	}
	if a.Email != "alice@example.com" || a.Status != ledger.StatusActive {
		t.Fatalf("account %+v", a)
	}
	if _, err := s.CreateAccountWithPassword(bg, "ALICE@example.com", GoodPassword); !errors.Is(err, ledger.ErrDuplicateEmail) {
		t.Fatalf("duplicate sign-up: %v", err)
	}
	if _, err := s.CreateAccountWithPassword(bg, "bob@example.com", "short"); !errors.Is(err, ledger.ErrWeakPassword) {
		t.Fatalf("weak password: %v", err)
	}
	if _, err := s.GetAccountByEmail(bg, "bob@example.com"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a refused sign-up created an account: %v", err)
	}
	if _, err := s.CreateAccountWithPassword(bg, "not an email", GoodPassword); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("bad email: %v", err)
	}

	got, err := s.Authenticate(bg, "alice@EXAMPLE.com", GoodPassword)
	if err != nil || got.ID != a.ID {
		t.Fatalf("Authenticate: %+v, %v", got, err)
	}
	// Wrong password, unknown email, an operator-made account without password, an absurdly
	// long password: one error, no hint which.
	opAcct := MustAccount(t, s, "operator-made@example.com")
	for _, c := range [][2]string{
		{"alice@example.com", "wrong password!"},
		{"nobody@example.com", GoodPassword},
		{opAcct.Email, GoodPassword},
		{"alice@example.com", strings.Repeat("a", ledger.MaxPasswordLen+1)},
	} {
		if _, err := s.Authenticate(bg, c[0], c[1]); err != ledger.ErrInvalidCredentials {
			t.Errorf("Authenticate(%q, %q) = %v, want ErrInvalidCredentials", c[0], c[1], err)
		}
	}

	// The operator's account gets a password; a disabled account is refused after the check.
	if err := s.SetPassword(bg, opAcct.ID, "short"); !errors.Is(err, ledger.ErrWeakPassword) {
		t.Fatalf("SetPassword weak: %v", err)
	}
	if err := s.SetPassword(bg, opAcct.ID, GoodPassword+"!"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(bg, opAcct.Email, GoodPassword+"!"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetAccountStatus(bg, a.ID, ledger.StatusDisabled); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Authenticate(bg, a.Email, GoodPassword); !errors.Is(err, ledger.ErrAccountDisabled) || got.ID != a.ID {
		t.Fatalf("disabled: %+v, %v", got, err)
	}
	if _, err := s.Authenticate(bg, a.Email, "wrong password!"); err != ledger.ErrInvalidCredentials {
		t.Fatalf("disabled, wrong password: %v", err)
	}
}

// countArgon2 counts the argon2id computations of the package until the test ends. Set it only
// while nothing else hashes: the counter is shared.
func countArgon2(t *testing.T) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	old := ledger.Argon2Key
	ledger.Argon2Key = func(password, salt []byte, passes, memory uint32, threads uint8, keyLen uint32) []byte {
		n.Add(1)
		return old(password, salt, passes, memory, threads, keyLen)
	}
	t.Cleanup(func() { ledger.Argon2Key = old })
	return &n
}

// testAuthenticateTiming checks that an unknown email and an account without a password cost
// the same argon2id work as a wrong (or the right) password, so that the time of the answer does
// not tell whether an email has an account. It counts hash computations instead of timing them:
// timings on a loaded machine are noise, a count is exact.
func testAuthenticateTiming(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	if _, err := s.CreateAccountWithPassword(bg, "timing@example.com", GoodPassword); err != nil {
		t.Fatal(err)
	}
	MustAccount(t, s, "no-password@example.com")
	cases := []struct {
		name, email, password string
		want                  error
	}{
		{"right password", "timing@example.com", GoodPassword, nil},
		{"wrong password", "timing@example.com", "wrong password!", ledger.ErrInvalidCredentials},
		{"unknown email", "nobody@example.com", "wrong password!", ledger.ErrInvalidCredentials},
		{"no password set", "no-password@example.com", "wrong password!", ledger.ErrInvalidCredentials},
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

func testSessions(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	a, err := s.CreateAccountWithPassword(bg, "sess@example.com", GoodPassword)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateSession(bg, a.ID, 0); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("ttl 0: %v", err)
	}
	if _, _, err := s.CreateSession(bg, "acct_nonexistent00000", time.Hour); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("unknown account: %v", err)
	}
	tok, sess, err := s.CreateSession(bg, a.ID, 12*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != ledger.SessionTokenLen || sess.AccountID != a.ID || len(sess.CSRFToken) != ledger.CsrfTokenLen ||
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
	for _, bad := range []string{"", "x", tok[:len(tok)-1] + "!", strings.Repeat("A", ledger.SessionTokenLen)} {
		if _, _, err := s.GetSession(bg, bad); err != ledger.ErrInvalidSession {
			t.Errorf("GetSession(%q): %v", bad, err)
		}
	}
	// The token itself is never stored: no stored value or key contains it.
	assertNotStored(t, eng, s, tok)

	// Expiry follows the ledger clock.
	clock = clock.Add(12*time.Hour - time.Second)
	if _, _, err := s.GetSession(bg, tok); err != nil {
		t.Fatalf("a second before expiry: %v", err)
	}
	clock = clock.Add(time.Second)
	if _, _, err := s.GetSession(bg, tok); err != ledger.ErrInvalidSession {
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
	if _, _, err := s.GetSession(bg, tok); err != ledger.ErrInvalidSession {
		t.Fatalf("after log-out: %v", err)
	}
	if _, _, err := s.GetSession(bg, tok2); err != nil {
		t.Fatalf("the other session: %v", err)
	}
	if err := s.SetPassword(bg, a.ID, "another good password"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetSession(bg, tok2); err != ledger.ErrInvalidSession {
		t.Fatalf("after password change: %v", err)
	}

	// No sessions for a disabled account.
	if _, err := s.SetAccountStatus(bg, a.ID, ledger.StatusDisabled); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateSession(bg, a.ID, time.Hour); !errors.Is(err, ledger.ErrAccountDisabled) {
		t.Fatalf("disabled: %v", err)
	}
}

func testSignUpConcurrentSameEmail(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, dup := 0, 0
	for i := range 4 {
		wg.Go(func() {
			_, err := s.CreateAccountWithPassword(bg, "race@example.com", fmt.Sprintf("%s %d", GoodPassword, i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, ledger.ErrDuplicateEmail):
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
