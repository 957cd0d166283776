package sealing

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// Key is one of the plugin's sealing keys and where it comes from: its setting, which
// instances sharing a ledger set alike, else a key file of this instance's own in the textgen
// folder of Caddy's data directory, made on first use. A key file is read or made only when
// the textgen app starts (never by `caddy validate`); a setting may be read earlier.
type Key struct {
	// Setting names the setting that gives the key ("retention_key"), in messages.
	Setting string
	// Value is the setting as configured, placeholders unresolved; "" when it is not set.
	Value string
	// File is the key file's name in the textgen folder of Caddy's data directory
	// ("retention.key"), used when Value is "".
	File string
	// User is what needs the key ("retention", "smtp", "textgen_console"), in the warning.
	User string
	// Seals is what the key seals ("the text it keeps"), in the warning.
	Seals string
	// Without is one more way out of a key file that cannot be made ("set retention off"), in
	// its error; "" for none.
	Without string
}

// Set reports whether the key comes from its setting.
func (k Key) Set() bool { return k.Value != "" }

// Path is the key file's path.
func (k Key) Path() string { return filepath.Join(caddy.AppDataDir(), "textgen", k.File) }

// Load returns the key from its setting or else, after WarnUnshared, from its key file.
func (k Key) Load(log *zap.Logger, shared bool) ([]byte, error) {
	if k.Set() {
		return k.FromSetting()
	}
	k.WarnUnshared(log, shared)
	return k.FromFile()
}

// FromSetting decodes the setting, its placeholders ({env.…}) resolved; the error names it.
func (k Key) FromSetting() ([]byte, error) {
	key, err := ParseKey(caddy.NewReplacer().ReplaceAll(k.Value, ""))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.Setting, err)
	}
	return key, nil
}

// FromFile reads the key file, making it first (KeyFile); the error names the file and what
// the operator can do.
func (k Key) FromFile() ([]byte, error) {
	path := k.Path()
	key, err := KeyFile(path)
	if err != nil {
		ways := "set " + k.Setting
		if k.Without != "" {
			ways += ", make Caddy's data directory writable, or " + k.Without
		} else {
			ways += " or make Caddy's data directory writable"
		}
		return nil, fmt.Errorf("no %s, and its key file %s: %w (%s)", k.Setting, path, err, ways)
	}
	return key, nil
}

// WarnUnshared warns, when the key comes from its key file and other instances share the
// ledger (a PostgreSQL ledger), that they cannot open what this instance seals.
func (k Key) WarnUnshared(log *zap.Logger, shared bool) {
	if k.Set() || !shared {
		return
	}
	log.Warn(fmt.Sprintf("%s without %s on a ledger other instances share: this instance seals %s with its own key file, which the others cannot open; set the same %s on every instance",
		k.User, k.Setting, k.Seals, k.Setting), zap.String("key_file", k.Path()))
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
