package badgerledger

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The Badger engine's working state: an account's balances, open holds and next entry
// number, and its keys (keyEntry, keys.go), live in memory while it is used, read from disk on
// first use into the account cache (cache.go), so that a hold or a key lookup of an account in
// use reads no disk. A change is applied here under the account's
// mutex and recorded by blind writes that the group committer makes durable (commit.go).

// account is the in-memory state of one account.
type account struct {
	id  string
	rec atomic.Pointer[ledger.Account] // replaced, never mutated; read without mu
	// The cache's bookkeeping (cache.go): pins counts the calls using the account, seen is the
	// committer's last queued operation when one of them ended, used is set by each use and
	// cleared by the eviction's passes.
	pins atomic.Int32
	seen atomic.Uint64
	used atomic.Bool
	// keyCreateMu makes counting an account's keys and creating one a single step
	// (CreateKeyCapped); it is held across the new key's disk sync, so it is not mu.
	keyCreateMu sync.Mutex
	// sessMu orders CreateSession with SetPassword (which ends the account's sessions); it is
	// not mu, so a password change never stalls the account's holds behind its disk sync.
	sessMu sync.Mutex

	mu       sync.Mutex
	bal      int64 // live balance
	testBal  int64
	held     int64 // open live holds
	testHeld int64
	nextSeq  uint64 // seq of the account's next entry; the first is 1
	// holds has every open hold, plus resolved holds until their resolution is durable (after
	// that, a repeated call reads the hold record from disk).
	holds  map[string]*holdMem
	refs   map[string]*refMem  // grant references whose entry is not yet known durable
	idem   map[string]*idemMem // idempotency records not yet known durable
	recent []recentItem        // resolutions/refs/idem writes in op order, for prune
	keys   []*keyEntry
	// lots are the account's live credits that expire (expiry.go), sorted by ledger.SortLots;
	// nil when none do.
	lots []ledger.Lot
	// orgMu serialises the changes of an organisation's members with each other and with its
	// members' key creation (members.go); it is held across their disk sync, so it is
	// not mu. org is the organisation's members and their months (guarded by mu; nil for a
	// personal account).
	orgMu sync.Mutex
	org   *orgState
}

type holdMem struct {
	rec holdRecord
	op  uint64 // operation that last wrote rec
}

type refMem struct {
	entry ledger.Entry
	op    uint64
}

type idemMem struct {
	rec ledger.IdempotencyRecord
	op  uint64
}

type recentItem struct {
	kind byte // 'h' hold, 'r' grant reference, 'i' idempotency record
	key  string
	op   uint64
}

// prune forgets in-memory copies that snap shows, so that later checks read them from snap.
// Called with a.mu held.
func (a *account) prune(snap *snapshot) {
	i := 0
	for ; i < len(a.recent) && a.recent[i].op <= snap.upTo; i++ {
		it := a.recent[i]
		switch it.kind {
		case 'h':
			if h := a.holds[it.key]; h != nil && h.op == it.op && h.rec.State != ledger.HoldOpen {
				delete(a.holds, it.key)
			}
		case 'r':
			if r := a.refs[it.key]; r != nil && r.op == it.op {
				delete(a.refs, it.key)
			}
		case 'i':
			if r := a.idem[it.key]; r != nil && r.op == it.op {
				delete(a.idem, it.key)
			}
		}
	}
	if i == len(a.recent) {
		a.recent = a.recent[:0]
	} else {
		a.recent = a.recent[i:]
	}
}

// figures returns balance and open holds for mode. Called with a.mu held.
func (a *account) figures(m ledger.Mode) (bal, held int64) {
	if m == ledger.Test {
		return a.testBal, a.testHeld
	}
	return a.bal, a.held
}

func (a *account) add(m ledger.Mode, dBal, dHeld int64) {
	if m == ledger.Test {
		a.testBal += dBal
		a.testHeld += dHeld
	} else {
		a.bal += dBal
		a.held += dHeld
	}
}

func (a *account) balance() ledger.Balance {
	return ledger.Balance{
		AccountID:     a.id,
		Balance:       a.bal,
		Available:     a.bal - a.held,
		TestBalance:   a.testBal,
		TestAvailable: a.testBal - a.testHeld,
	}
}

// appendEntry records one change of the account's credits: it gives e the next entry number,
// the account, the time t and the figures after applying dBal to the balance and dHeld to the
// open holds of e.Mode, and returns it with the entry's and the balance record's writes. Every
// change of credits goes through here, so the "after" figures are computed one way. Called with
// a.mu held.
func (a *account) appendEntry(e ledger.Entry, dBal, dHeld int64, t time.Time) (ledger.Entry, []write) {
	e.Seq, e.AccountID, e.Amount, e.Time = a.nextSeq, a.id, dBal, t
	a.nextSeq++
	a.add(e.Mode, dBal, dHeld)
	bal, held := a.figures(e.Mode)
	e.BalanceAfter, e.AvailableAfter = bal, bal-held
	return e, []write{set(entryKey(a.id, e.Seq), entryJSON(&e)), a.balanceWrite()}
}

// balanceWrite is the account's balance record as it is now. Called with a.mu held.
func (a *account) balanceWrite() write {
	return set(balanceKey(a.id), balanceRecordJSON(&balanceRecord{
		Balance: a.bal, TestBalance: a.testBal, NextSeq: a.nextSeq,
	}))
}

func newAccount(rec ledger.Account) *account {
	compactAccount(&rec)
	a := &account{id: rec.ID, nextSeq: 1} // its maps are made when first needed (compact.go)
	a.rec.Store(&rec)
	return a
}
