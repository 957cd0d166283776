package ledger

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// Argon2Params are the argon2id settings of a password hash. They are stored in the hash itself
// (PHC string format), so the defaults can change without invalidating stored passwords.
type Argon2Params struct {
	Memory  uint32 // KiB
	Time    uint32 // passes
	Threads uint8
	SaltLen uint32 // bytes
	KeyLen  uint32 // bytes
}

// DefaultArgon2 is OWASP's argon2id minimum (m=19 MiB, t=2, p=1): about 30-60 ms per hash on
// the 2-core reference machine, which keeps log-ins and tests fast while making offline
// guessing expensive.
var DefaultArgon2 = Argon2Params{Memory: 19 * 1024, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}

// Bounds on the parameters VerifyPassword accepts, so that a corrupted or planted record cannot
// make one log-in allocate gigabytes or spin for minutes.
const (
	maxArgon2Memory  = 256 * 1024 // KiB
	maxArgon2Time    = 16
	maxArgon2Threads = 16
)

// Password policy (NIST SP 800-63B: length over composition rules, no truncation).
const (
	MinPasswordLen = 10  // characters
	MaxPasswordLen = 256 // bytes; argon2 has no limit, this bounds the work per request
)

var b64 = base64.RawStdEncoding

// Argon2Key computes every argon2id key of the package, for hashing and for checking alike. It
// is a variable so that a test can count the calls: a failed log-in must cost the same number of
// hashes whatever the reason, and a count says so where a stopwatch on a busy machine cannot.
var Argon2Key = argon2.IDKey

// HashPassword returns the argon2id hash of password in PHC string format:
// $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash> (unpadded standard base64).
func HashPassword(password string) (string, error) {
	return hashPassword(password, DefaultArgon2)
}

func hashPassword(password string, p Argon2Params) (string, error) {
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("hashing password: %w", err)
	}
	key := Argon2Key([]byte(password), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.Memory, p.Time, p.Threads, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// VerifyPassword reports whether password matches the PHC-encoded argon2id hash. An error means
// the hash itself is malformed or out of bounds.
func VerifyPassword(encoded, password string) (bool, error) {
	p, salt, want, err := parseHash(encoded)
	if err != nil {
		return false, err
	}
	got := Argon2Key([]byte(password), salt, p.Time, p.Memory, p.Threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

func parseHash(encoded string) (Argon2Params, []byte, []byte, error) {
	var p Argon2Params
	bad := func(why string) (Argon2Params, []byte, []byte, error) {
		return p, nil, nil, fmt.Errorf("password hash: %s: %w", why, ErrInvalidArgument)
	}
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return bad("not an argon2id PHC string")
	}
	var v int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return bad("unsupported version")
	}
	var threads uint32
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &threads); err != nil {
		return bad("malformed parameters")
	}
	if p.Memory < 8 || p.Memory > maxArgon2Memory || p.Time < 1 || p.Time > maxArgon2Time || threads < 1 || threads > maxArgon2Threads {
		return bad("parameters out of bounds")
	}
	p.Threads = uint8(threads)
	salt, err := b64.DecodeString(parts[4])
	if err != nil || len(salt) < 8 || len(salt) > 64 {
		return bad("malformed salt")
	}
	key, err := b64.DecodeString(parts[5])
	if err != nil || len(key) < 16 || len(key) > 64 {
		return bad("malformed hash")
	}
	p.SaltLen, p.KeyLen = uint32(len(salt)), uint32(len(key))
	return p, salt, key, nil
}

// DummyHash is hashed against when there is no real hash to check (unknown email, no password
// set), so that those answers take as long as a wrong password. Computed on first use.
var DummyHash = sync.OnceValue(func() string {
	h, err := HashPassword("no such account: this hash is only timed, never matched")
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return h
})

// commonPasswords are refused whatever their length (a small list of the most common ones that
// pass the length rule; a breached-password service is out of reach offline).
var commonPasswords = map[string]bool{
	"1234567890": true, "12345678910": true, "123456789012": true, "0123456789": true,
	"qwertyuiop": true, "1q2w3e4r5t": true, "password123": true, "password1234": true,
	"passwort123": true, "iloveyou123": true, "qwerty12345": true, "abcdefghij": true,
	"1qaz2wsx3edc": true, "qwertzuiop": true, "0987654321": true, "aaaaaaaaaa": true,
	"letmein1234": true, "welcome123": true, "administrator": true, "changeme123": true,
}

// CheckPasswordPolicy refuses passwords that are too short, too long, not UTF-8, the email
// itself, one repeated character, or on a short list of the most common passwords. It returns
// a *WeakPasswordError.
func CheckPasswordPolicy(email, password string) error {
	weak := func(reason string) error { return &WeakPasswordError{Reason: reason} }
	switch {
	case !utf8.ValidString(password):
		return weak("The password contains invalid characters.")
	case utf8.RuneCountInString(password) < MinPasswordLen:
		return weak(fmt.Sprintf("Use at least %d characters.", MinPasswordLen))
	case len(password) > MaxPasswordLen:
		return weak(fmt.Sprintf("Use at most %d characters.", MaxPasswordLen))
	}
	lower := strings.ToLower(password)
	if e := strings.ToLower(strings.TrimSpace(email)); e != "" {
		if lower == e || (strings.Contains(e, "@") && lower == e[:strings.IndexByte(e, '@')]) {
			return weak("Do not use your email address as the password.")
		}
	}
	if commonPasswords[lower] || strings.Count(password, string([]rune(password)[:1])) == utf8.RuneCountInString(password) {
		return weak("This password is too common. Choose another one.")
	}
	return nil
}
