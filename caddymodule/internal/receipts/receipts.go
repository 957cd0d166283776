// Package receipts signs the receipts of generations and purchases for a customer's books:
// Ed25519 over the receipt's RFC 8785 canonical JSON (JSON Canonicalization Scheme), with keys
// kept in the ledger (ledger.Receipts), their private half sealed with the handler's sealing key
// (internal/sealing), so every instance that shares a ledger and that key signs with the same
// key, and no ledger holds it in clear. Verifying needs only the public keys the handler
// publishes (PublicKeys) and this package's Verify, or any Ed25519 and JCS implementation.
package receipts

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/ledger"
)

// Generation is the signed receipt of one generation: what was charged, for which key and tool,
// when, and the SHA-256 of the text (hex), which the customer can compare with what they
// received.
type Generation struct {
	Type       string `json:"type"` // "generation"
	RequestID  string `json:"request_id"`
	AccountID  string `json:"account_id"`
	KeyID      string `json:"key_id"`
	Tool       string `json:"tool"`
	Mode       string `json:"mode"` // "live" or "test" (test credits are not money)
	Credits    int64  `json:"credits"`
	Time       string `json:"time"` // RFC 3339, UTC: when the charge settled
	TextSHA256 string `json:"text_sha256"`
}

// Purchase is the signed receipt of one purchase of credits.
type Purchase struct {
	Type        string `json:"type"` // "purchase"
	Reference   string `json:"reference"`
	AccountID   string `json:"account_id"`
	Credits     int64  `json:"credits"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	Time        string `json:"time"` // RFC 3339, UTC: when the purchase was credited
}

// Signed is a signed receipt as served: the receipt, the Ed25519 signature of its canonical
// JSON (base64url without padding) and the id of the key that made it.
type Signed struct {
	Receipt   json.RawMessage `json:"receipt"`
	Signature string          `json:"signature"`
	KeyID     string          `json:"key_id"`
}

// PublicKey is one key of the published list.
type PublicKey struct {
	KeyID     string `json:"key_id"`
	Algorithm string `json:"algorithm"`  // "Ed25519"
	PublicKey string `json:"public_key"` // base64url without padding, 32 bytes
	// ValidFrom and ValidUntil (RFC 3339, UTC) bound the receipts the key signed; ValidUntil is
	// absent for the current key.
	ValidFrom  string `json:"valid_from"`
	ValidUntil string `json:"valid_until,omitempty"`
	Current    bool   `json:"current"`
}

// KeySet is the document of the well-known path.
type KeySet struct {
	Keys []PublicKey `json:"keys"`
}

// Time formats a receipt's time.
func Time(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// TextDigest is the digest of a generation's text as a receipt shows it.
func TextDigest(sum []byte) string { return hex.EncodeToString(sum) }

// Canonical returns the RFC 8785 canonical JSON of v.
func Canonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(b)
}

var b64 = base64.RawURLEncoding

// Signer signs with the ledger's current receipt key.
type Signer struct {
	store  ledger.Receipts
	sealer *sealing.Sealer

	mu   sync.Mutex
	open map[string]ed25519.PrivateKey // unsealed keys by id
}

// New returns a Signer of the keys in store, sealed with sealer.
func New(store ledger.Receipts, sealer *sealing.Sealer) *Signer {
	return &Signer{store: store, sealer: sealer, open: map[string]ed25519.PrivateKey{}}
}

// keyAD binds a sealed private key to its id.
func keyAD(id string) []byte { return append([]byte("textgen receipt signing key\x00"), id...) }

// newKey makes a key and seals its private half.
func (s *Signer) newKey() (ledger.ReceiptKey, ed25519.PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return ledger.ReceiptKey{}, nil, err
	}
	sum := sha256.Sum256(pub)
	id := "rk_" + hex.EncodeToString(sum[:8])
	return ledger.ReceiptKey{ID: id, PublicKey: pub, SealedPrivateKey: s.sealer.Seal(priv, keyAD(id))}, priv, nil
}

// signingKey returns the key that signs a receipt dated at: the one whose period (ValidFrom to
// ValidUntil) holds it, so that every listed period covers what its key signed, a receipt
// fetched again after a rotation included. It makes the ledger's first key when it has no
// current one. A zero at is the current key.
func (s *Signer) signingKey(ctx context.Context, at time.Time) (string, ed25519.PrivateKey, error) {
	keys, err := s.store.ReceiptKeys(ctx)
	if err != nil {
		return "", nil, err
	}
	if n := len(keys); n == 0 || !keys[n-1].ValidUntil.IsZero() {
		k, _, err := s.newKey()
		if err != nil {
			return "", nil, err
		}
		if _, err := s.store.AddReceiptKey(ctx, k, false); err != nil {
			return "", nil, err
		}
		// Read again: another instance may have made the first key at the same time.
		if keys, err = s.store.ReceiptKeys(ctx); err != nil {
			return "", nil, err
		}
	}
	k := keyAt(keys, at)
	priv, err := s.unseal(k)
	return k.ID, priv, err
}

// keyAt is the key of keys (oldest first, the current one last) whose period holds at: the
// current key for a zero at or one at or after its start, the first key for one before every
// key's start (a receipt of a ledger that charged before it had a key; Ensure at start keeps
// that from happening on a new ledger).
func keyAt(keys []ledger.ReceiptKey, at time.Time) ledger.ReceiptKey {
	if at.IsZero() {
		return keys[len(keys)-1]
	}
	// A receipt's time is in whole seconds; so are the periods the list publishes.
	for _, k := range keys {
		from, until := k.ValidFrom.Truncate(time.Second), k.ValidUntil.Truncate(time.Second)
		if !at.Before(from) && (k.ValidUntil.IsZero() || at.Before(until)) {
			return k
		}
	}
	if at.Before(keys[0].ValidFrom.Truncate(time.Second)) {
		return keys[0]
	}
	return keys[len(keys)-1]
}

// Ensure makes the ledger's first key now, when it has none, and checks that the current key
// opens with this sealing key: the handler calls it when it starts, so the first key's period
// begins before the first generation or purchase it signs.
func (s *Signer) Ensure(ctx context.Context) error {
	_, _, err := s.signingKey(ctx, time.Time{})
	return err
}

// receiptTime is the time a receipt states (a Generation's or a Purchase's), zero for another.
func receiptTime(r any) time.Time {
	var v string
	switch r := r.(type) {
	case Generation:
		v = r.Time
	case *Generation:
		v = r.Time
	case Purchase:
		v = r.Time
	case *Purchase:
		v = r.Time
	}
	t, _ := time.Parse(time.RFC3339, v)
	return t
}

// unseal opens a key's private half, once per key.
func (s *Signer) unseal(k ledger.ReceiptKey) (ed25519.PrivateKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.open[k.ID]; ok {
		return p, nil
	}
	p, err := OpenKey(s.sealer, k)
	if err != nil {
		return nil, err
	}
	s.open[k.ID] = p
	return p, nil
}

// OpenKey unseals the private half of k with sealer.
func OpenKey(sealer *sealing.Sealer, k ledger.ReceiptKey) (ed25519.PrivateKey, error) {
	plain, err := sealer.Open(k.SealedPrivateKey, keyAD(k.ID))
	if err != nil {
		// Not the key's bytes in any form: only that this sealing key cannot open it.
		return nil, fmt.Errorf("the receipt signing key %s cannot be opened with this sealing key (is retention_key the same on every instance?)", k.ID)
	}
	if len(plain) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("the receipt signing key %s is malformed", k.ID)
	}
	return ed25519.PrivateKey(plain), nil
}

// Sign signs the receipt r (a Generation or a Purchase) with the key whose period holds the
// receipt's time.
func (s *Signer) Sign(ctx context.Context, r any) (Signed, error) {
	c, err := Canonical(r)
	if err != nil {
		return Signed{}, err
	}
	id, priv, err := s.signingKey(ctx, receiptTime(r))
	if err != nil {
		return Signed{}, err
	}
	return Signed{Receipt: c, Signature: b64.EncodeToString(ed25519.Sign(priv, c)), KeyID: id}, nil
}

// Rotate makes a new current key; the old ones stay listed.
func (s *Signer) Rotate(ctx context.Context) (PublicKey, error) {
	k, _, err := s.newKey()
	if err != nil {
		return PublicKey{}, err
	}
	cur, err := s.store.AddReceiptKey(ctx, k, true)
	if err != nil {
		return PublicKey{}, err
	}
	return publicKey(cur), nil
}

// PublicKeys returns the published key list, making the first key when there is none (so the
// list a customer reads is never empty once the handler serves).
func (s *Signer) PublicKeys(ctx context.Context) (KeySet, error) {
	keys, err := s.store.ReceiptKeys(ctx)
	if err != nil {
		return KeySet{}, err
	}
	if len(keys) == 0 {
		if err := s.Ensure(ctx); err != nil {
			return KeySet{}, err
		}
		if keys, err = s.store.ReceiptKeys(ctx); err != nil {
			return KeySet{}, err
		}
	}
	set := KeySet{Keys: make([]PublicKey, 0, len(keys))}
	for _, k := range keys {
		set.Keys = append(set.Keys, publicKey(k))
	}
	return set, nil
}

func publicKey(k ledger.ReceiptKey) PublicKey {
	// In whole seconds, as receipts' times are: a key made or rotated in to a second covers the
	// receipts of that second (keyAt signs them with it), so no receipt's time is before its
	// key's valid_from as the list shows it.
	p := PublicKey{KeyID: k.ID, Algorithm: "Ed25519", PublicKey: b64.EncodeToString(k.PublicKey),
		ValidFrom: Time(k.ValidFrom.Truncate(time.Second)), Current: k.ValidUntil.IsZero()}
	if !k.ValidUntil.IsZero() {
		p.ValidUntil = Time(k.ValidUntil.Truncate(time.Second))
	}
	return p
}

// ErrInvalid is a receipt that does not verify.
var ErrInvalid = errors.New("the receipt's signature does not verify")

// Verify checks a signed receipt against a published key list: the key it names must be listed,
// and the signature must be that key's over the canonical form of the receipt as given.
func Verify(set KeySet, sr Signed) error {
	var pub ed25519.PublicKey
	for _, k := range set.Keys {
		if k.KeyID == sr.KeyID {
			b, err := b64.DecodeString(k.PublicKey)
			if err != nil || len(b) != ed25519.PublicKeySize {
				return fmt.Errorf("the listed key %s is malformed", k.KeyID)
			}
			pub = b
		}
	}
	if pub == nil {
		return fmt.Errorf("the key %q is not listed: %w", sr.KeyID, ErrInvalid)
	}
	sig, err := b64.DecodeString(sr.Signature)
	if err != nil {
		return fmt.Errorf("the signature is not base64url: %w", ErrInvalid)
	}
	if err := noDuplicateNames(sr.Receipt); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	c, err := jcs.Transform(sr.Receipt)
	if err != nil {
		return fmt.Errorf("the receipt is not JSON: %w", ErrInvalid)
	}
	if !ed25519.Verify(pub, c, sig) {
		return ErrInvalid
	}
	return nil
}

// noDuplicateNames refuses JSON in which an object, at any depth, has a member name twice (as
// decoded: "cr\u0065dits" is "credits"). RFC 8785 accepts no such input, and readers disagree
// on it: with "credits":500 before the signed "credits":1, a reader that keeps the first value
// reads 500 of a receipt whose signature holds for 1.
func noDuplicateNames(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return checkNames(d)
}

// checkNames reads one JSON value from d, refusing a member name twice in any of its objects.
func checkNames(d *json.Decoder) error {
	t, err := d.Token()
	if err != nil {
		return errors.New("the receipt is not JSON")
	}
	delim, ok := t.(json.Delim)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	for d.More() {
		if delim == '{' {
			t, err := d.Token()
			if err != nil {
				return errors.New("the receipt is not JSON")
			}
			name, _ := t.(string)
			if seen[name] {
				return fmt.Errorf("the receipt has the member %q twice in one object", name)
			}
			seen[name] = true
		}
		if err := checkNames(d); err != nil {
			return err
		}
	}
	if _, err := d.Token(); err != nil {
		return errors.New("the receipt is not JSON")
	}
	return nil
}
