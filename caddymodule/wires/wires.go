// Package wires holds the textgen.wires.* Caddy modules: the model servers of a textgen handler
// or of one of its tools, and the wire they speak (a backends.Wire). Ollama's own API
// (textgen.wires.ollama) and the OpenAI-compatible one (textgen.wires.openai) are here; another
// wire is a module of this namespace in any package, built in with xcaddy, that implements
// Module: the handler's "wire" field (inline key "api") and the Caddyfile's `wire <name> { }`
// load it by name.
package wires

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/backends"
)

// Namespace is the module namespace of the wires: a wire named foo is the module
// textgen.wires.foo.
const Namespace = "textgen.wires"

// Module is a textgen.wires.* module, once Caddy has provisioned it: the model servers of a
// handler or a tool and how they are spoken to. The handler gives both to a backends.Chat, which
// owns everything around the wire (hosts' health, admission, failover, the watchdog). A module
// that implements caddyfile.Unmarshaler can be written as `wire <name> { ... }`.
type Module interface {
	caddy.Module
	// Hosts are the model servers' addresses (backends.ChatConfig.Hosts).
	Hosts() []string
	// Wire speaks to them.
	Wire() backends.Wire
}

// Puller is a Module whose start-up check may pull the models its servers lack: with
// PullModels true, the handler's check asks it to and waits for it longer.
type Puller interface {
	PullModels() bool
}

// ContextSizer is a Module whose servers run a model with the context size each request names
// (backends.Request.NumCtx, the handler's num_ctx): the handler refuses num_ctx when none of its
// wires is one, as the setting would do nothing.
type ContextSizer interface {
	SizesContext() bool
}

// Key tells m's settings apart, for the pool of open model servers: modules of the same name
// and JSON share one client. The JSON is hashed, so that a key in it stays out of the pool's
// names.
func Key(m Module) (string, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("wire %s: %w", m.CaddyModule().ID, err)
	}
	sum := sha256.Sum256(raw)
	return string(m.CaddyModule().ID) + " " + hex.EncodeToString(sum[:8]), nil
}

// Name is the wire's name: the last label of its module ID ("ollama", "openai").
func Name(m Module) string { return m.CaddyModule().ID.Name() }
