package textgenapp

import "sync/atomic"

// Automatic top-ups: My Account of a ledger (which holds the Stripe key and knows the accounts'
// top-up rules) registers a watcher, and the textgen handler tells it, after each live hold,
// the account's available credits. The watcher decides from memory whether a top-up is due and
// starts it in the background: a hold never waits for it, and an account without a rule costs a
// map lookup. Without a registered watcher (no My Account, or top_up off) a hold costs one
// atomic load more.

// TopUpWatcher hears of live holds.
type TopUpWatcher interface {
	// Held is called after a live hold of account left available credits. It must not block.
	Held(account string, available int64)
}

var (
	topUpWatchers registry[TopUpWatcher]
	// watching counts the registered watchers, so that a hold of a config without one takes no lock.
	watching atomic.Int32
)

// RegisterTopUpWatcher makes w hear of store's live holds until the returned func is called.
func RegisterTopUpWatcher(store appLedger, w TopUpWatcher) (unregister func()) {
	watching.Add(1)
	un := topUpWatchers.register(store, w)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			un()
			watching.Add(-1)
		}
	}
}

// HeldLive tells the newest watcher of store about a live hold of account that left available
// credits; nothing when none is registered.
func HeldLive(store appLedger, account string, available int64) {
	if watching.Load() == 0 {
		return
	}
	if w := topUpWatchers.newest(store); w != nil {
		w.Held(account, available)
	}
}
