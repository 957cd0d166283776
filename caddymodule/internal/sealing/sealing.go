// Package sealing is the plugin's one AES-256-GCM sealing: what it keeps on disk that must not
// be read there (kept generations, queued e-mail with live links) is sealed with a fresh random
// nonce and associated data that binds the ciphertext to its place. The key is never stored
// with the ledger: it comes from a setting (instances sharing a PostgreSQL ledger set the same
// one), else from a file of its own in Caddy's data directory, made once (keys.go).
package sealing

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// Sealer seals and opens with one key.
type Sealer struct{ aead cipher.AEAD }

// New returns a Sealer of a 32-byte key.
func New(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("the key must be 32 bytes, not %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal returns nonce || ciphertext of plain, bound to ad.
func (s *Sealer) Seal(plain, ad []byte) []byte {
	ns := s.aead.NonceSize()
	out := make([]byte, ns, ns+len(plain)+s.aead.Overhead())
	_, _ = rand.Read(out)
	return s.aead.Seal(out, out[:ns], plain, ad)
}

// Open reverses Seal; it fails for what was sealed under another key or other ad.
func (s *Sealer) Open(sealed, ad []byte) ([]byte, error) {
	ns := s.aead.NonceSize()
	if len(sealed) < ns+s.aead.Overhead() {
		return nil, errors.New("sealed data too short")
	}
	return s.aead.Open(nil, sealed[:ns], sealed[ns:], ad)
}
