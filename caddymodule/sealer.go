package caddymodule

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The encryption of kept generations. The ledger stores only what this file seals: AES-256-GCM,
// a fresh random nonce per chunk, and the account, the request id and the chunk's number as
// associated data, so a chunk cannot be read under another generation or moved to another place
// in its own. The key is never stored with the ledger: it comes from the retention_key setting
// (instances sharing a PostgreSQL ledger set the same one), else from a file of its own in
// Caddy's data directory, made once (retentionKeyFile).

// sealer seals and opens the chunks of kept generations.
type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("the retention key must be 32 bytes, not %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// chunkAD binds a chunk to its generation and its place in it.
func chunkAD(acct, rid string, n int) []byte {
	ad := make([]byte, 0, len(acct)+len(rid)+6)
	ad = append(append(append(ad, acct...), 0), rid...)
	ad = append(ad, 0)
	return binary.BigEndian.AppendUint32(ad, uint32(n))
}

// seal returns nonce || ciphertext of plain.
func (s *sealer) seal(acct, rid string, n int, plain []byte) []byte {
	ns := s.aead.NonceSize()
	out := make([]byte, ns, ns+len(plain)+s.aead.Overhead())
	_, _ = rand.Read(out)
	return s.aead.Seal(out, out[:ns], plain, chunkAD(acct, rid, n))
}

// open reverses seal; it fails for a chunk sealed under another key, generation or number.
func (s *sealer) open(acct, rid string, n int, sealed []byte) ([]byte, error) {
	ns := s.aead.NonceSize()
	if len(sealed) < ns+s.aead.Overhead() {
		return nil, errors.New("kept chunk too short")
	}
	return s.aead.Open(nil, sealed[:ns], sealed[ns:], chunkAD(acct, rid, n))
}

// parseRetentionKey decodes the retention_key setting: 32 bytes in standard or URL-safe base64.
func parseRetentionKey(v string) ([]byte, error) {
	v = strings.TrimSpace(v)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(v); err == nil {
			if len(k) != 32 {
				return nil, fmt.Errorf("retention_key: %d bytes; it must be 32 bytes in base64 (openssl rand -base64 32)", len(k))
			}
			return k, nil
		}
	}
	return nil, errors.New("retention_key: not base64; make one with openssl rand -base64 32")
}

// retentionKeyFile returns the key kept in path, making it first (32 random bytes, base64, mode
// 0600 in a 0700 directory) when there is none. Two processes making it at once agree: the
// file is created exclusively, and the loser reads the winner's.
func retentionKeyFile(path string) ([]byte, error) {
	if data, err := os.ReadFile(path); err == nil {
		return parseRetentionKey(string(data))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the retention key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("making the retention key's directory: %w", err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".retention-key-*")
	if err != nil {
		return nil, fmt.Errorf("writing the retention key: %w", err)
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
			return nil, fmt.Errorf("writing the retention key: %w", err)
		}
	} else {
		tmp.Close()
		return nil, fmt.Errorf("writing the retention key: %w", err)
	}
	// A hard link fails if the file exists: whoever linked first made the key.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			data, rerr := os.ReadFile(path)
			if rerr != nil {
				return nil, fmt.Errorf("reading the retention key: %w", rerr)
			}
			return parseRetentionKey(string(data))
		}
		return nil, fmt.Errorf("writing the retention key: %w", err)
	}
	return key, nil
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
