package caddymodule

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
)

// The encryption of kept generations (internal/sealing: AES-256-GCM, a fresh random nonce per
// chunk), with the account, the request id and the chunk's number as associated data, so a
// chunk cannot be read under another generation or moved to another place in its own. The key
// is never stored with the ledger: it comes from the retention_key setting (instances sharing a
// PostgreSQL ledger set the same one), else from a file of its own in Caddy's data directory,
// made once (retentionKeyFile).

// sealer seals and opens the chunks of kept generations.
type sealer struct{ s *sealing.Sealer }

func newSealer(key []byte) (*sealer, error) {
	s, err := sealing.New(key)
	if err != nil {
		return nil, fmt.Errorf("the retention key: %w", err)
	}
	return &sealer{s: s}, nil
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
	return s.s.Seal(plain, chunkAD(acct, rid, n))
}

// open reverses seal; it fails for a chunk sealed under another key, generation or number.
func (s *sealer) open(acct, rid string, n int, sealed []byte) ([]byte, error) {
	return s.s.Open(sealed, chunkAD(acct, rid, n))
}

// parseRetentionKey decodes the retention_key setting: 32 bytes in standard or URL-safe base64.
func parseRetentionKey(v string) ([]byte, error) {
	k, err := sealing.ParseKey(v)
	if err != nil {
		return nil, fmt.Errorf("retention_key: %w", err)
	}
	return k, nil
}

// retentionKeyFile returns the key kept in path, making it first (sealing.KeyFile).
func retentionKeyFile(path string) ([]byte, error) {
	k, err := sealing.KeyFile(path)
	if err != nil {
		return nil, fmt.Errorf("the retention key: %w", err)
	}
	return k, nil
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
