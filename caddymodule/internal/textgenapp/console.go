package textgenapp

import "github.com/caddy-textgen/textgen/caddymodule/internal/sealing"

// The console's key for the admin API: `caddy textgen operator create` enrols an operator whose
// TOTP secret is sealed with the key of the textgen_console that serves the same ledger (its
// console_key, or its key file). The console registers its key when it starts and withdraws it
// in its Cleanup; during a reload the newest registration answers.

var consoleSealers registry[*sealing.Sealer]

// RegisterConsoleSealer makes s the console key of store until the returned func is called.
func RegisterConsoleSealer(store appLedger, s *sealing.Sealer) (unregister func()) {
	return consoleSealers.register(store, s)
}

// ConsoleSealerFor returns the newest console key registered for store, or nil.
func ConsoleSealerFor(store appLedger) *sealing.Sealer { return consoleSealers.newest(store) }
