package ledger

import (
	"fmt"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"
)

// Argument checks of the Store API, for every engine. They run before an engine touches its
// store, so that each engine refuses the same arguments with the same ErrInvalidArgument
// message and a bad call costs no store access.

// Limits on the strings a caller passes.
const (
	maxRequestIDLen      = 128
	maxKeyIDLen          = 64
	maxToolLen           = 64
	MaxReferenceLen      = 256
	maxReasonLen         = 512
	maxCurrencyLen       = 8
	maxEmailLen          = 254
	maxKeyNameLen        = 100
	maxIdempotencyKeyLen = 264 // the client's 255 characters and the handler's mode prefix
)

// CheckString refuses v if it is required and empty, longer than max bytes, or not UTF-8.
func CheckString(field, v string, max int, required bool) error {
	if required && v == "" {
		return fmt.Errorf("%s is required: %w", field, ErrInvalidArgument)
	}
	if len(v) > max || !utf8.ValidString(v) {
		return fmt.Errorf("%s must be valid UTF-8 of at most %d bytes: %w", field, max, ErrInvalidArgument)
	}
	return nil
}

// checkMode refuses a mode other than Live and Test.
func checkMode(m Mode) error {
	if m != Live && m != Test {
		return fmt.Errorf("mode %q: %w", m, ErrInvalidArgument)
	}
	return nil
}

// NormalizeEmail trims and lower-cases an address and rejects what is obviously not one
// (display names, several addresses, spaces, no @). It does not check that the domain exists.
func NormalizeEmail(email string) (string, error) {
	e := FoldEmail(email)
	bad := fmt.Errorf("email %q is not a valid address: %w", email, ErrInvalidArgument)
	if e == "" || len(e) > maxEmailLen || strings.ContainsAny(e, " \t\r\n<>,;\"") {
		return "", bad
	}
	addr, err := mail.ParseAddress(e)
	if err != nil || addr.Address != e || addr.Name != "" {
		return "", bad
	}
	at := strings.LastIndexByte(e, '@')
	if at <= 0 || at == len(e)-1 {
		return "", bad
	}
	return e, nil
}

// FoldEmail is the form an email is looked up by: trimmed and lower-cased. NormalizeEmail
// also checks that it is an address; lookups do not, an unknown email is just not found.
func FoldEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// CheckAccountStatus checks SetAccountStatus's status.
func CheckAccountStatus(status AccountStatus) error {
	if status != StatusActive && status != StatusDisabled {
		return fmt.Errorf("status %q: %w", status, ErrInvalidArgument)
	}
	return nil
}

// CheckKeyRequest checks CreateKey's arguments at time t and returns expires in UTC.
func CheckKeyRequest(mode Mode, name string, expires, t time.Time) (time.Time, error) {
	if err := checkMode(mode); err != nil {
		return time.Time{}, err
	}
	if len(name) > maxKeyNameLen || !utf8.ValidString(name) {
		return time.Time{}, fmt.Errorf("key name must be valid UTF-8 of at most %d bytes: %w", maxKeyNameLen, ErrInvalidArgument)
	}
	if !expires.IsZero() {
		if !expires.After(t) {
			return time.Time{}, fmt.Errorf("key expiry %s is not in the future: %w", expires, ErrInvalidArgument)
		}
		expires = expires.UTC()
	}
	return expires, nil
}

// CheckHoldRequest checks a Hold or Reserve.
func CheckHoldRequest(req HoldRequest) error {
	if err := checkMode(req.Mode); err != nil {
		return err
	}
	if err := CheckString("request id", req.RequestID, maxRequestIDLen, true); err != nil {
		return err
	}
	if err := CheckString("key id", req.KeyID, maxKeyIDLen, false); err != nil {
		return err
	}
	if err := CheckString("tool", req.Tool, maxToolLen, false); err != nil {
		return err
	}
	if req.TTL < 0 {
		return fmt.Errorf("hold ttl %v is negative: %w", req.TTL, ErrInvalidArgument)
	}
	if req.Credits < 0 || req.Credits > MaxHoldCredits {
		return fmt.Errorf("hold credits %d are not between 0 and %d: %w", req.Credits, MaxHoldCredits, ErrInvalidArgument)
	}
	return nil
}

// CheckResolve checks a Settle (reason "") or Void.
func CheckResolve(requestID, reason string) error {
	if err := CheckString("request id", requestID, maxRequestIDLen, true); err != nil {
		return err
	}
	return CheckString("reason", reason, maxReasonLen, false)
}

// CheckGrantRequest checks a Grant.
func CheckGrantRequest(req GrantRequest) error {
	if err := checkMode(req.Mode); err != nil {
		return err
	}
	switch req.Kind {
	case KindGrant, KindPurchase:
		if req.Credits <= 0 {
			return fmt.Errorf("a %s needs a positive number of credits: %w", req.Kind, ErrInvalidArgument)
		}
	case KindAdjustment:
		if req.Credits == 0 {
			return fmt.Errorf("an adjustment needs a non-zero number of credits: %w", ErrInvalidArgument)
		}
	default:
		return fmt.Errorf("kind %q is not grant, purchase or adjustment: %w", req.Kind, ErrInvalidArgument)
	}
	if req.Kind == KindPurchase {
		if req.Reference == "" {
			return fmt.Errorf("a purchase needs the payment reference: %w", ErrInvalidArgument)
		}
		if req.Mode != Live {
			return fmt.Errorf("test credits are not sold: %w", ErrInvalidArgument)
		}
	}
	if req.AmountCents < 0 {
		return fmt.Errorf("amount_cents must not be negative: %w", ErrInvalidArgument)
	}
	for _, c := range []struct {
		f, v string
		max  int
	}{{"reference", req.Reference, MaxReferenceLen}, {"reason", req.Reason, maxReasonLen}, {"currency", req.Currency, maxCurrencyLen}} {
		if err := CheckString(c.f, c.v, c.max, false); err != nil {
			return err
		}
	}
	return nil
}

// CheckRefillTarget checks RefillTestCredits' upTo.
func CheckRefillTarget(upTo int64) error {
	if upTo <= 0 {
		return fmt.Errorf("refill target %d must be positive: %w", upTo, ErrInvalidArgument)
	}
	return nil
}

// CheckIdempotencyRecord checks a BeginIdempotent.
func CheckIdempotencyRecord(rec IdempotencyRecord) error {
	if err := CheckString("idempotency key", rec.Key, maxIdempotencyKeyLen, true); err != nil {
		return err
	}
	if err := CheckString("request id", rec.RequestID, maxRequestIDLen, false); err != nil {
		return err
	}
	if err := CheckString("fingerprint", rec.Fingerprint, MaxReferenceLen, false); err != nil {
		return err
	}
	if rec.HoldTTL < 0 {
		return fmt.Errorf("hold ttl %v is negative: %w", rec.HoldTTL, ErrInvalidArgument)
	}
	return nil
}

// CheckFinishStatus checks FinishIdempotent's status: an HTTP status or StatusReleased.
func CheckFinishStatus(status int) error {
	if (status < 100 || status > 599) && status != StatusReleased {
		return fmt.Errorf("status %d: %w", status, ErrInvalidArgument)
	}
	return nil
}

// CheckSessionTTL checks CreateSession's ttl.
func CheckSessionTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > MaxSessionTTL {
		return fmt.Errorf("session lifetime %s is not in (0, %s]: %w", ttl, MaxSessionTTL, ErrInvalidArgument)
	}
	return nil
}
