package ledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"time"
)

// Redemption codes, for every engine (badgerledger/codes.go, pgledger/codes.go): the operator
// makes a code worth some credits for up to MaxUses accounts; a customer redeems it into the
// live credits of the account. A code is shown once, at creation, and stored only as its
// SHA-256 digest, like an API key. Its credit is a grant entry with reference
// CodeReference(id), so the account's history, its CSV and Verify read it like any grant, and
// the grant-reference index is a second guard that an account is credited once per code.

// Codes is the role of redemption codes.
type Codes interface {
	// CreateCode makes a code worth n.Credits live credits for up to n.MaxUses accounts (0: 1)
	// and returns it in full, once, with its stored record.
	//
	// Expected errors:
	//   - ErrInvalidArgument: credits or uses not in [1, MaxCodeCredits] / [1, MaxCodeUses], an
	//     expiry that is not in the future, a note over 200 bytes or not UTF-8.
	//   - ErrUnavailable, ErrClosed.
	CreateCode(ctx context.Context, n NewCode) (code string, c RedemptionCode, err error)

	// ListCodes returns codes newest first, at most limit (0: 50, at most 1000), each with how
	// many accounts redeemed it.
	//
	// Expected errors: ErrInvalidArgument (a negative limit), ErrClosed; ctx's error.
	ListCodes(ctx context.Context, limit int) ([]RedemptionCode, error)

	// GetCode returns the code with id.
	//
	// Expected errors: ErrNotFound, ErrClosed.
	GetCode(ctx context.Context, id string) (RedemptionCode, error)

	// DisableCode stops the code at once, on every instance: no later Redeem credits it.
	// Disabling a disabled code changes nothing and returns it. Redemptions made stay.
	//
	// Expected errors: ErrNotFound, ErrClosed.
	DisableCode(ctx context.Context, id string) (RedemptionCode, error)

	// CodeRedemptions returns who redeemed the code, newest first, at most limit (0: 50, at
	// most 1000).
	//
	// Expected errors: ErrInvalidArgument (a negative limit), ErrNotFound, ErrClosed; ctx's
	// error.
	CodeRedemptions(ctx context.Context, id string, limit int) ([]CodeRedemption, error)

	// Redeem credits the account with the code's credits (live), once per account and at most
	// MaxUses times over all accounts, on any number of instances: counting the use, recording
	// the redemption and the grant entry are one step.
	//
	// Expected errors:
	//   - ErrCodeNotRedeemable, wrapped by one of ErrCodeUnknown (malformed or no such code),
	//     ErrCodeDisabled, ErrCodeExpired, ErrCodeUsedUp. A caller that answers someone who
	//     does not hold the code tells them apart from none of them.
	//   - ErrAlreadyRedeemed: this account redeemed the code before; nothing was credited.
	//   - ErrNotFound: no account has accountID.
	//   - ErrAccountDisabled: the account is disabled.
	//   - ErrUnavailable, ErrClosed.
	Redeem(ctx context.Context, accountID, code string) (Redemption, error)
}

var (
	// ErrCodeNotRedeemable: a redemption code that cannot be redeemed (unknown, disabled,
	// expired or used up); each reason wraps it.
	ErrCodeNotRedeemable = errors.New("this code cannot be redeemed")
	// ErrCodeUnknown: no code is stored with this digest, or the text is not shaped like one.
	ErrCodeUnknown = fmt.Errorf("%w: unknown code", ErrCodeNotRedeemable)
	// ErrCodeDisabled: the operator disabled the code.
	ErrCodeDisabled = fmt.Errorf("%w: the code is disabled", ErrCodeNotRedeemable)
	// ErrCodeExpired: the code's expiry has passed.
	ErrCodeExpired = fmt.Errorf("%w: the code has expired", ErrCodeNotRedeemable)
	// ErrCodeUsedUp: the code has been redeemed MaxUses times.
	ErrCodeUsedUp = fmt.Errorf("%w: the code has been used up", ErrCodeNotRedeemable)
	// ErrAlreadyRedeemed: the account redeemed this code before.
	ErrAlreadyRedeemed = errors.New("this account has already redeemed this code")
)

// NewCode is what CreateCode makes.
type NewCode struct {
	Credits int64 // live credits per redemption, 1 to MaxCodeCredits
	MaxUses int64 // how many accounts may redeem it; 0: 1
	// Expires is when the code stops working; zero: never.
	Expires time.Time
	Note    string // the operator's note (a campaign, who it is for); at most 200 bytes
}

// RedemptionCode is a stored code: never the code itself, only its last 4 characters.
type RedemptionCode struct {
	ID       string    `json:"id"`
	Last4    string    `json:"last4"`
	Credits  int64     `json:"credits"`
	MaxUses  int64     `json:"max_uses"`
	Uses     int64     `json:"uses"`
	Expires  time.Time `json:"expires,omitzero"`
	Note     string    `json:"note,omitempty"`
	Created  time.Time `json:"created"`
	Disabled time.Time `json:"disabled,omitzero"`
}

// State says whether the code can be redeemed at t: "active", "disabled", "expired" or
// "used up".
func (c RedemptionCode) State(t time.Time) string {
	switch {
	case !c.Disabled.IsZero():
		return "disabled"
	case !c.Expires.IsZero() && !t.Before(c.Expires):
		return "expired"
	case c.Uses >= c.MaxUses:
		return "used up"
	}
	return "active"
}

// Redeemable is nil when the code can be redeemed at t, else the error Redeem gives.
func (c RedemptionCode) Redeemable(t time.Time) error {
	switch c.State(t) {
	case "disabled":
		return ErrCodeDisabled
	case "expired":
		return ErrCodeExpired
	case "used up":
		return ErrCodeUsedUp
	}
	return nil
}

// CodeRedemption is one account's redemption of a code.
type CodeRedemption struct {
	CodeID    string    `json:"code_id"`
	AccountID string    `json:"account_id"`
	Email     string    `json:"email,omitempty"`
	Credits   int64     `json:"credits"`
	Seq       uint64    `json:"seq"` // the grant entry's number in the account's ledger
	Time      time.Time `json:"time"`
}

// Redemption is what Redeem did: the grant entry and the account's figures after it.
type Redemption struct {
	Code    RedemptionCode `json:"code"`
	Entry   Entry          `json:"entry"`
	Balance Balance        `json:"balance"`
}

// Limits of codes.
const (
	MaxCodeCredits = 1_000_000
	MaxCodeUses    = 1_000_000
	maxCodeNote    = 200
	// CodeIDLen is the length of a code's id: "code_" + 12 Base62 characters.
	CodeIDLen = len("code_") + 12
)

// RedeemReason is the reason of a redemption's grant entry.
const RedeemReason = "redemption code"

// CodeReference is the grant reference of code id's redemption entries.
func CodeReference(id string) string { return "code:" + id }

// CodeOfReference is the code id of a redemption entry's reference, ok false for any other.
func CodeOfReference(ref string) (string, bool) {
	id, ok := strings.CutPrefix(ref, "code:")
	return id, ok && len(id) == CodeIDLen && strings.HasPrefix(id, "code_")
}

// NewCodeID makes a code's id.
func NewCodeID() string { return "code_" + RandomBase62(12) }

// The code format: "TG-" and four groups of five characters of codeAlphabet, which leaves out
// 0, O, 1, I and L so that a code read aloud or off paper is typed right. The first 16
// characters are random (about 79 bits); the last 4 are a checksum of them, so a mistyped code is
// refused without a lookup. Case, spaces and hyphens do not matter when it is redeemed.
const (
	codePrefix      = "TG"
	codeAlphabet    = "23456789ABCDEFGHJKMNPQRSTUVWXYZ" // 31 characters
	codeRandomLen   = 16
	codeChecksumLen = 4
	codeBodyLen     = codeRandomLen + codeChecksumLen
	// MaxCodeInput is the longest text Redeem reads as a code: more is refused unread.
	MaxCodeInput = 64
)

// MakeCode makes a fresh code in its printed form.
func MakeCode() string {
	// RandomBase62 is uniform over 62 characters, and 62 is twice the alphabet's 31.
	r := []byte(RandomBase62(codeRandomLen))
	for i := range r {
		r[i] = codeAlphabet[strings.IndexByte(Base62, r[i])%len(codeAlphabet)]
	}
	body := string(r)
	body += codeChecksum(body)
	var out strings.Builder
	out.WriteString(codePrefix)
	for i := 0; i < codeBodyLen; i += 5 {
		out.WriteByte('-')
		out.WriteString(body[i : i+5])
	}
	return out.String()
}

func codeChecksum(body string) string {
	v := crc32.ChecksumIEEE([]byte(codePrefix + body))
	var out [codeChecksumLen]byte
	for i := codeChecksumLen - 1; i >= 0; i-- {
		out[i] = codeAlphabet[v%uint32(len(codeAlphabet))]
		v /= uint32(len(codeAlphabet))
	}
	return string(out[:])
}

// NormalizeCode returns a code as it is hashed (upper case, no spaces or hyphens, "TG" and 20
// characters), ok false when s is not shaped like a code or its checksum is wrong. It touches
// no store.
func NormalizeCode(s string) (string, bool) {
	if len(s) > MaxCodeInput {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '-' || c == ' ' || c == '\t':
			continue
		case c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		}
		b.WriteByte(c)
	}
	n := b.String()
	if len(n) != len(codePrefix)+codeBodyLen || !strings.HasPrefix(n, codePrefix) {
		return "", false
	}
	body := n[len(codePrefix):]
	for i := 0; i < len(body); i++ {
		if strings.IndexByte(codeAlphabet, body[i]) < 0 {
			return "", false
		}
	}
	if codeChecksum(body[:codeRandomLen]) != body[codeRandomLen:] {
		return "", false
	}
	return n, true
}

// CodeDigest is what a store keeps of a normalised code.
func CodeDigest(normalized string) [32]byte { return sha256.Sum256([]byte(normalized)) }

// CodeLast4 is the part of a normalised code that lists show.
func CodeLast4(normalized string) string { return normalized[len(normalized)-4:] }

// CheckNewCode checks CreateCode's argument at t and returns it with its defaults and its
// expiry in UTC.
func CheckNewCode(n NewCode, t time.Time) (NewCode, error) {
	if n.MaxUses == 0 {
		n.MaxUses = 1
	}
	if n.Credits < 1 || n.Credits > MaxCodeCredits {
		return n, fmt.Errorf("a code's credits must be 1 to %d: %w", MaxCodeCredits, ErrInvalidArgument)
	}
	if n.MaxUses < 1 || n.MaxUses > MaxCodeUses {
		return n, fmt.Errorf("a code's uses must be 1 to %d: %w", MaxCodeUses, ErrInvalidArgument)
	}
	if !n.Expires.IsZero() {
		if !n.Expires.After(t) {
			return n, fmt.Errorf("a code's expiry must be in the future: %w", ErrInvalidArgument)
		}
		n.Expires = n.Expires.UTC()
	}
	if err := CheckString("note", n.Note, maxCodeNote, false); err != nil {
		return n, err
	}
	return n, nil
}

// CheckCodeID refuses what NewCodeID cannot have made, before any lookup.
func CheckCodeID(id string) error {
	if len(id) != CodeIDLen || !strings.HasPrefix(id, "code_") || base62Run(id[5:]) != CodeIDLen-5 {
		return fmt.Errorf("code %q: %w", id, ErrNotFound)
	}
	return nil
}
