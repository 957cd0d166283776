// Package opauth is how an operator of the web console proves who they are: enrolment (a
// password, a TOTP secret sealed before the ledger stores it, single-use recovery codes) and
// the check of a TOTP code (RFC 6238, 30-second steps, SHA-1, 6 digits, with pquerna/otp),
// which returns the code's time step so that the ledger can refuse it a second time
// (ledger.Operators.UseTOTPStep). The console and the admin API's `caddy textgen operator
// create` both enrol through it.
package opauth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"

	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/ledger"
)

// The TOTP parameters every authenticator app understands.
const (
	period     = 30
	skewSteps  = 1 // a code of the step before or after is accepted too (clocks drift)
	codeDigits = otp.DigitsSix
	// RecoveryCodes is how many recovery codes an operator gets.
	RecoveryCodes = 10
)

// Enrollment is what an operator is told once, at creation: nothing of it is kept in clear.
type Enrollment struct {
	Operator      ledger.Operator `json:"operator"`
	Password      string          `json:"password,omitempty"` // only when it was generated
	TOTPSecret    string          `json:"totp_secret"`        // base32, for typing into an app
	TOTPURL       string          `json:"totp_url"`           // otpauth://, for a QR code
	RecoveryCodes []string        `json:"recovery_codes"`
}

// sealAD binds a sealed secret to its operator's address: a secret copied onto another
// operator's record does not open.
func sealAD(email string) []byte {
	return []byte("textgen console totp\x00" + strings.ToLower(strings.TrimSpace(email)))
}

// Enroll creates an operator with a new TOTP secret and recovery codes. An empty password is
// generated (and returned); issuer names the service in the authenticator app.
func Enroll(ctx context.Context, store ledger.Operators, sealer *sealing.Sealer, issuer, email string, role ledger.OperatorRole, password string) (Enrollment, error) {
	key, err := totp.Generate(totp.GenerateOpts{Issuer: issuer, AccountName: strings.ToLower(strings.TrimSpace(email)),
		Period: period, Digits: codeDigits, Algorithm: otp.AlgorithmSHA1})
	if err != nil {
		return Enrollment{}, fmt.Errorf("making a TOTP secret: %w", err)
	}
	en := Enrollment{TOTPSecret: key.Secret(), TOTPURL: key.URL()}
	if password == "" {
		password = randomCode(5) // 20 characters of a 32-letter alphabet: 100 bits
		en.Password = password
	}
	for range RecoveryCodes {
		en.RecoveryCodes = append(en.RecoveryCodes, randomCode(3))
	}
	op, err := store.CreateOperator(ctx, ledger.NewOperator{Email: email, Role: role, Password: password,
		TOTPSealed: sealer.Seal([]byte(key.Secret()), sealAD(email)), RecoveryCodes: en.RecoveryCodes})
	if err != nil {
		return Enrollment{}, err
	}
	en.Operator = op
	return en, nil
}

// ErrBadCode is a TOTP code that is not the operator's for now.
var ErrBadCode = errors.New("wrong code")

// CheckTOTP checks code against the operator's sealed secret at t and returns the time step it
// belongs to. The caller then records the step (UseTOTPStep), which refuses a replay.
func CheckTOTP(sealer *sealing.Sealer, op ledger.Operator, sealed []byte, code string, t time.Time) (int64, error) {
	code = strings.ReplaceAll(strings.TrimSpace(code), " ", "")
	if len(code) != codeDigits.Length() {
		return 0, ErrBadCode
	}
	secret, err := sealer.Open(sealed, sealAD(op.Email))
	if err != nil {
		return 0, fmt.Errorf("opening the TOTP secret of operator %s (is the console key the one it was enrolled with?): %w", op.ID, err)
	}
	step := t.Unix() / period
	for d := int64(-skewSteps); d <= skewSteps; d++ {
		at := time.Unix((step+d)*period, 0)
		want, err := totp.GenerateCodeCustom(string(secret), at, totp.ValidateOpts{Period: period, Digits: codeDigits, Algorithm: otp.AlgorithmSHA1})
		if err != nil {
			return 0, fmt.Errorf("computing a TOTP code: %w", err)
		}
		if subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 {
			return step + d, nil
		}
	}
	return 0, ErrBadCode
}

// Code is the TOTP code of secret at t (for tests and for the CLI's own checks).
func Code(secret string, t time.Time) (string, error) {
	return totp.GenerateCodeCustom(secret, t, totp.ValidateOpts{Period: period, Digits: codeDigits, Algorithm: otp.AlgorithmSHA1})
}

// codeAlphabet is 32 characters without 0, 1, I and O, which read like others.
const codeAlphabet = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"

// randomCode is groups of 4 characters from crypto/rand, joined by dashes.
func randomCode(groups int) string {
	b := make([]byte, groups*4)
	_, _ = rand.Read(b)
	var sb strings.Builder
	for i, c := range b {
		if i > 0 && i%4 == 0 {
			sb.WriteByte('-')
		}
		sb.WriteByte(codeAlphabet[c&31])
	}
	return sb.String()
}
