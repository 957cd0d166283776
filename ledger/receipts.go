package ledger

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"
)

// Signed receipts, for every engine (badgerledger/receipts.go, pgledger/receipts.go): the keys that
// sign them and the digest of each charged generation's text, kept for good so that a receipt
// can be signed after the text itself is gone. The ledger keeps a signing key's private half
// only as the caller sealed it (the handler's sealing key), so no engine ever holds it in clear;
// the public half is what a customer's accountant checks a receipt with.

// ReceiptKey is one signing key of receipts. Every key ever used stays listed, so a receipt
// signed before a rotation still verifies; the current key is the one whose ValidUntil is zero.
type ReceiptKey struct {
	ID string `json:"id"`
	// PublicKey is the Ed25519 public key (32 bytes).
	PublicKey []byte `json:"public_key"`
	// SealedPrivateKey is the private key as the caller sealed it: the store never sees it in
	// clear.
	SealedPrivateKey []byte `json:"sealed_private_key"`
	// ValidFrom is when the key became current (the store sets it); ValidUntil when another
	// replaced it (zero while it is current).
	ValidFrom  time.Time `json:"valid_from"`
	ValidUntil time.Time `json:"valid_until,omitzero"`
}

// Receipts is the role of signed receipts' keys and digests. A generation's digest is stored by
// Generations.PutGenerations with the put that ends it (GenerationPut.TextSHA256).
type Receipts interface {
	// ReceiptKeys returns every signing key, oldest first (the current one last); none is an
	// empty list.
	ReceiptKeys(ctx context.Context) ([]ReceiptKey, error)
	// AddReceiptKey stores k (its ValidFrom and ValidUntil are set by the store) and returns the
	// current key after the call. Without rotate it stores k only when there is no current key,
	// so instances starting together agree on one: each gets the key that won. With rotate, k
	// becomes the current key and the one it replaces gets ValidUntil = k's ValidFrom.
	// Errors: ErrInvalidArgument (id, public key or sealed key malformed, or the id taken),
	// ErrUnavailable.
	AddReceiptKey(ctx context.Context, k ReceiptKey, rotate bool) (ReceiptKey, error)
	// ReceiptDigest returns the SHA-256 digest of the text of the account's generation
	// requestID, as stored with its last put. Errors: ErrNotFound, ErrUnavailable.
	ReceiptDigest(ctx context.Context, accountID, requestID string) ([]byte, error)
}

const (
	maxReceiptKeyID     = 64
	maxSealedReceiptKey = 1024
)

// CheckReceiptKey checks what AddReceiptKey is given.
func CheckReceiptKey(k ReceiptKey) error {
	if err := CheckString("receipt key id", k.ID, maxReceiptKeyID, true); err != nil {
		return err
	}
	if len(k.PublicKey) != ed25519.PublicKeySize {
		return fmt.Errorf("a receipt key's public key must be %d bytes: %w", ed25519.PublicKeySize, ErrInvalidArgument)
	}
	// A private key in clear (64 bytes, or its 32-byte seed) is not what a sealed one looks like:
	// AES-GCM adds a nonce and a tag.
	if len(k.SealedPrivateKey) <= ed25519.PrivateKeySize || len(k.SealedPrivateKey) > maxSealedReceiptKey {
		return fmt.Errorf("a receipt key's sealed private key must have %d to %d bytes: %w", ed25519.PrivateKeySize+1, maxSealedReceiptKey, ErrInvalidArgument)
	}
	return nil
}

// checkTextDigest checks a put's digest: none, or SHA-256.
func checkTextDigest(d []byte) error {
	if d != nil && len(d) != sha256.Size {
		return fmt.Errorf("a text digest must be %d bytes: %w", sha256.Size, ErrInvalidArgument)
	}
	return nil
}

// SortReceiptKeys orders keys oldest first, the current one last.
func SortReceiptKeys(keys []ReceiptKey) {
	slices.SortStableFunc(keys, func(a, b ReceiptKey) int {
		if a.ValidUntil.IsZero() != b.ValidUntil.IsZero() {
			if a.ValidUntil.IsZero() {
				return 1
			}
			return -1
		}
		return a.ValidFrom.Compare(b.ValidFrom)
	})
}

// ReceiptDigestRecord is a generation's digest as Export gives it.
type ReceiptDigestRecord struct {
	AccountID string
	RequestID string
	SHA256    []byte
}
