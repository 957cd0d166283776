package caddymodule

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// slotPool shares the running-generation counts of a ledger's accounts between its handlers and
// across reloads (keyed by the ledger), so the streams of a replaced config still count.
var slotPool = caddy.NewUsagePool()

// joinSlots joins (or creates) the counts of the ledger with key; leaveSlots lets go.
func joinSlots(ledgerKey string) (*accountSlots, error) {
	v, _, err := slotPool.LoadOrNew(ledgerKey, func() (caddy.Destructor, error) {
		return &accountSlots{m: map[string]int{}}, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*accountSlots), nil
}

func leaveSlots(ledgerKey string) { _, _ = slotPool.Delete(ledgerKey) }

// accountSlots counts the generations running per account, shared by every handler (and
// config) of one ledger, so the streams of a replaced config still count.
type accountSlots struct {
	mu sync.Mutex
	m  map[string]int
}

func (*accountSlots) Destruct() error { return nil }

// acquire takes one of max places of the account; false when all are taken.
func (s *accountSlots) acquire(acct string, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[acct] >= max {
		return false
	}
	s.m[acct]++
	return true
}

func (s *accountSlots) release(acct string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.m[acct] - 1; n > 0 {
		s.m[acct] = n
	} else {
		delete(s.m, acct) // memory is bounded by the accounts running right now
	}
}

func (s *accountSlots) running(acct string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[acct]
}

// takeSlot takes one of the account's concurrent places, or answers 429
// too_many_concurrent_requests.
func (g *generation) takeSlot() bool {
	lm := g.h.lim
	if lm.slots == nil {
		return true
	}
	if lm.slots.acquire(g.acct.ID, lm.maxCon) {
		g.slotHeld = true
		return true
	}
	hdr := g.w.Header()
	hdr.Set("RateLimit-Policy", `"concurrency";q=`+strconv.Itoa(lm.maxCon)+`;qu="concurrent-requests"`)
	hdr.Set("RateLimit", `"concurrency";r=0`)
	metrics.rejections.WithLabelValues("concurrency").Inc()
	e := newError(http.StatusTooManyRequests, "too_many_concurrent_requests", "",
		fmt.Sprintf("this account already runs %d generations, the most it may run at once; no credit was charged; retry when one has finished", lm.maxCon))
	e.RetryAfter = time.Second
	g.errKind = "concurrency"
	g.fail(e)
	return false
}
