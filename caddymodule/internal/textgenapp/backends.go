package textgenapp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/backends"
)

// Backends are pooled by their configuration, so a config reload that keeps the Ollama settings
// keeps the same client, its connections, health state and counts of requests in flight, and the
// streams of the old config are never cut off by the new one.
var ollamas = caddy.NewUsagePool()

// OllamaRef is a module's share of a pooled Ollama backend.
type OllamaRef = Ref[*backends.Chat]

func newOllamaRef(cfg backends.ChatConfig) (*OllamaRef, error) {
	logger := cfg.Logger
	cfg.Logger = nil
	keyJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfg.Logger = logger
	key := string(keyJSON)
	if cfg.HostCounter != nil { // a backend counting in a shared store is another backend
		key += "|hosts counted in " + cfg.HostCounter.String()
	}
	if cfg.APIKey != "" { // another key is another backend; the key itself is kept out
		sum := sha256.Sum256([]byte(cfg.APIKey))
		key += "|key " + hex.EncodeToString(sum[:8])
	}
	return acquire(ollamas, key,
		func() (*backends.Chat, error) {
			o, err := backends.NewChat(cfg)
			if err != nil {
				return nil, fmt.Errorf("ollama backend: %w", err)
			}
			return o, nil
		},
		func(o *backends.Chat) error { return o.Close() }, nil, nil)
}

// OpenOllamas returns the Ollama backends open in this process, keyed by their configuration
// (JSON), for tests.
func OpenOllamas() map[string]*backends.Chat {
	out := map[string]*backends.Chat{}
	ollamas.Range(func(k, v any) bool {
		if p, ok := v.(*pooled[*backends.Chat]); ok {
			if o, err := p.get(); err == nil {
				out[k.(string)] = o
			}
		}
		return true
	})
	return out
}
