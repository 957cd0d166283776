package textgenapp

import (
	"sync"

	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
)

// The console's key for the admin API: `caddy textgen operator create` enrols an operator whose
// TOTP secret is sealed with the key of the textgen_console that serves the same ledger (its
// console_key, or its key file). The console registers its key when it starts and withdraws it
// in its Cleanup; during a reload the newest registration answers.

var consoleSealers struct {
	mu   sync.Mutex
	byLS map[appLedger][]*sealing.Sealer
}

// RegisterConsoleSealer makes s the console key of store until the returned func is called.
func RegisterConsoleSealer(store appLedger, s *sealing.Sealer) (unregister func()) {
	consoleSealers.mu.Lock()
	defer consoleSealers.mu.Unlock()
	if consoleSealers.byLS == nil {
		consoleSealers.byLS = map[appLedger][]*sealing.Sealer{}
	}
	consoleSealers.byLS[store] = append(consoleSealers.byLS[store], s)
	return func() {
		consoleSealers.mu.Lock()
		defer consoleSealers.mu.Unlock()
		l := consoleSealers.byLS[store]
		for n, q := range l {
			if q == s {
				l = append(l[:n:n], l[n+1:]...)
				break
			}
		}
		if len(l) == 0 {
			delete(consoleSealers.byLS, store)
		} else {
			consoleSealers.byLS[store] = l
		}
	}
}

// ConsoleSealerFor returns the newest console key registered for store, or nil.
func ConsoleSealerFor(store appLedger) *sealing.Sealer {
	consoleSealers.mu.Lock()
	defer consoleSealers.mu.Unlock()
	l := consoleSealers.byLS[store]
	if len(l) == 0 {
		return nil
	}
	return l[len(l)-1]
}
