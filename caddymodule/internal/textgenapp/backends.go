package textgenapp

import (
	"encoding/json"
	"fmt"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/backends"
)

// Model servers are pooled by their configuration, so a config reload that keeps their settings
// keeps the same client, its connections, health state and counts of requests in flight, and the
// streams of the old config are never cut off by the new one.
var modelServers = caddy.NewUsagePool()

// ServersRef is a module's share of a pooled set of model servers. The modules see them as
// backends.ModelServers; only the pool knows the client that serves them (backends.Chat).
type ServersRef = Ref[backends.ModelServers]

// newServersRef pools the model servers of cfg by its JSON and wire, which tells cfg.Wire's
// settings apart (a wire's own settings are not in cfg's JSON).
func newServersRef(cfg backends.ChatConfig, wire string) (*ServersRef, error) {
	logger := cfg.Logger
	cfg.Logger = nil
	keyJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfg.Logger = logger
	key := string(keyJSON) + "|wire " + wire
	if cfg.HostCounter != nil { // a backend counting in a shared store is another backend
		key += "|hosts counted in " + cfg.HostCounter.String()
	}
	return acquire(modelServers, key,
		func() (backends.ModelServers, error) {
			c, err := backends.NewChat(cfg)
			if err != nil {
				return nil, fmt.Errorf("model servers: %w", err)
			}
			return c, nil
		},
		func(s backends.ModelServers) error { return s.Close() }, nil, nil)
}

// OpenServers returns the model servers open in this process, keyed by their configuration
// (JSON), for tests.
func OpenServers() map[string]backends.ModelServers {
	out := map[string]backends.ModelServers{}
	modelServers.Range(func(k, v any) bool {
		if p, ok := v.(*pooled[backends.ModelServers]); ok {
			if s, err := p.get(); err == nil {
				out[k.(string)] = s
			}
		}
		return true
	})
	return out
}
