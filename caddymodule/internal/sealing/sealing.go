// Package sealing is the plugin's one AES-256-GCM sealing: what it keeps on disk that must not
// be read there (kept generations, queued e-mail with live links) is sealed with a fresh random
// nonce and associated data that binds the ciphertext to its place. The key is never stored
// with the ledger: it comes from a setting (instances sharing a PostgreSQL ledger set the same
// one), else from a file of its own in Caddy's data directory, made once (KeyFile).
package sealing

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// ParseKey decodes a key setting: 32 bytes in standard or URL-safe base64.
func ParseKey(v string) ([]byte, error) {
	v = strings.TrimSpace(v)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(v); err == nil {
			if len(k) != 32 {
				return nil, fmt.Errorf("%d bytes; it must be 32 bytes in base64 (openssl rand -base64 32)", len(k))
			}
			return k, nil
		}
	}
	return nil, errors.New("not base64; make one with openssl rand -base64 32")
}

// KeyFile returns the key kept in path, making it first (32 random bytes, base64, mode
// 0600 in a 0700 directory) when there is none. Two processes making it at once agree: the
// file is created exclusively, and the loser reads the winner's.
func KeyFile(path string) ([]byte, error) {
	if data, err := os.ReadFile(path); err == nil {
		return ParseKey(string(data))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("making the key's directory: %w", err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".key-*")
	if err != nil {
		return nil, fmt.Errorf("writing the key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err == nil {
		_, err = tmp.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("writing the key: %w", err)
		}
	} else {
		tmp.Close()
		return nil, fmt.Errorf("writing the key: %w", err)
	}
	// A hard link fails if the file exists: whoever linked first made the key.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			data, rerr := os.ReadFile(path)
			if rerr != nil {
				return nil, fmt.Errorf("reading the key: %w", rerr)
			}
			return ParseKey(string(data))
		}
		return nil, fmt.Errorf("writing the key: %w", err)
	}
	return key, nil
}
