package opauth

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// TestEnrollAndCheck: an enrolled operator logs in with the generated password, the TOTP code of
// now (or of the step before or after) gives its step and any other code is refused; the secret
// is stored sealed (not in clear) and does not open under another operator's address or
// another key.
func TestEnrollAndCheck(t *testing.T) {
	store, err := badgerledger.Open(t.TempDir(), badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key := bytes.Repeat([]byte{7}, 32)
	sealer, _ := sealing.New(key)
	ctx := context.Background()
	en, err := Enroll(ctx, store, sealer, "Text API", "Ann@Example.com", ledger.OperatorOwner, "")
	if err != nil {
		t.Fatal(err)
	}
	if en.Password == "" || len(en.RecoveryCodes) != RecoveryCodes || !strings.HasPrefix(en.TOTPURL, "otpauth://totp/") ||
		en.Operator.Email != "ann@example.com" || en.Operator.RecoveryCodesLeft != RecoveryCodes {
		t.Fatalf("enrolment: %+v", en)
	}
	op, sealed, err := store.AuthenticateOperator(ctx, "ann@example.com", en.Password)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte(en.TOTPSecret)) {
		t.Fatal("the TOTP secret is stored in clear")
	}
	at := time.Date(2026, 5, 1, 9, 0, 10, 0, time.UTC)
	for d := -1; d <= 1; d++ {
		code, err := Code(en.TOTPSecret, at.Add(time.Duration(d)*30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		step, err := CheckTOTP(sealer, op, sealed, code, at)
		if err != nil || step != at.Unix()/30+int64(d) {
			t.Fatalf("the code of step %+d: step %d, %v", d, step, err)
		}
	}
	old, _ := Code(en.TOTPSecret, at.Add(-2*time.Minute))
	for _, bad := range []string{old, "", "12345", "1234567", "abcdef"} {
		if _, err := CheckTOTP(sealer, op, sealed, bad, at); !errors.Is(err, ErrBadCode) {
			t.Fatalf("code %q: %v", bad, err)
		}
	}
	now, _ := Code(en.TOTPSecret, at)
	other := op
	other.Email = "bob@example.com"
	if _, err := CheckTOTP(sealer, other, sealed, now, at); err == nil || errors.Is(err, ErrBadCode) {
		t.Fatalf("a secret moved to another operator opened: %v", err)
	}
	otherKey, _ := sealing.New(bytes.Repeat([]byte{8}, 32))
	if _, err := CheckTOTP(otherKey, op, sealed, now, at); err == nil || errors.Is(err, ErrBadCode) {
		t.Fatalf("a secret opened under another key: %v", err)
	}
}
