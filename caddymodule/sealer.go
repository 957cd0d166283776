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
// made once (retentionKey, internal/sealing keys.go).

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

// retentionKey is the key of kept generations (and of the receipt signing keys, sealed with
// it by internal/receipts).
func retentionKey(value string) sealing.Key {
	return sealing.Key{Setting: "retention_key", Value: value, File: "retention.key",
		User: "retention", Seals: "the text it keeps", Without: "set retention off"}
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
