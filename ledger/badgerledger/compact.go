package badgerledger

import "github.com/caddy-textgen/textgen/ledger"

// The Badger engine keeps the accounts in use and their keys in memory (memory.go, cache.go),
// up to Options.CacheAccounts of them and more while in use, so what each holds counts: the strings that repeat across them are
// kept once (a key's account id is its account's, its mode and prefix are the constants), and an
// account's maps of holds, grant references and idempotency records in flight are made when it
// first has one (most accounts, most of the time, have none).

// compactKey makes k share the strings it repeats with its account a and the constants.
func compactKey(k *ledger.Key, a *account) {
	if k.AccountID == a.id {
		k.AccountID = a.id
	}
	switch k.Mode {
	case ledger.Live:
		k.Mode = ledger.Live
	case ledger.Test:
		k.Mode = ledger.Test
	}
	switch k.Prefix {
	case ledger.LivePrefix:
		k.Prefix = ledger.LivePrefix
	case ledger.TestPrefix:
		k.Prefix = ledger.TestPrefix
	}
}

// compactAccount makes rec share its status with the constants.
func compactAccount(rec *ledger.Account) {
	switch rec.Status {
	case ledger.StatusActive:
		rec.Status = ledger.StatusActive
	case ledger.StatusDisabled:
		rec.Status = ledger.StatusDisabled
	}
}

// putHold records h as the account's hold rid. Called with a.mu held (or at load).
func (a *account) putHold(rid string, h *holdMem) {
	if a.holds == nil {
		a.holds = map[string]*holdMem{}
	}
	a.holds[rid] = h
}

// putRef records r as the entry of the account's grant reference ref. Called with a.mu held.
func (a *account) putRef(ref string, r *refMem) {
	if a.refs == nil {
		a.refs = map[string]*refMem{}
	}
	a.refs[ref] = r
}

// putIdem records r as the account's idempotency record key. Called with a.mu held.
func (a *account) putIdem(key string, r *idemMem) {
	if a.idem == nil {
		a.idem = map[string]*idemMem{}
	}
	a.idem[key] = r
}
