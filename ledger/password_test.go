package ledger

import (
	"errors"
	"strings"
	"testing"
)

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

// GoodPassword passes the policy (the conformance suite's ledgertest.GoodPassword).
const goodPassword = "correct horse battery"
