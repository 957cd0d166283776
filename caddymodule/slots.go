package caddymodule

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
)

// slotPool shares the running-generation counts of a ledger's accounts between its handlers and
// across reloads (keyed by the limits store, the ledger and the expiry), so the streams of a
// replaced config still count.
var slotPool = caddy.NewUsagePool()

type pooledSlots struct{ *ratelimit.Slots }

func (p pooledSlots) Destruct() error {
	p.Close()
	return nil
}

// joinSlots joins (or creates) the places under key: in the Redis store s (nil: in memory),
// under name; leaveSlots lets go.
func joinSlots(key string, s *ratelimit.Shared, name string, expiry time.Duration) (*ratelimit.Slots, error) {
	v, _, err := slotPool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return pooledSlots{ratelimit.NewSlots(s, name, expiry)}, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(pooledSlots).Slots, nil
}

func leaveSlots(key string) { _, _ = slotPool.Delete(key) }

// tooManyConcurrent is the 429 too_many_concurrent_requests answer of an account that runs
// max_concurrent_per_account generations already.
func (h *Handler) tooManyConcurrent(w http.ResponseWriter) *apiError {
	maxCon := h.lim.maxCon
	hdr := w.Header()
	hdr.Set("RateLimit-Policy", `"concurrency";q=`+strconv.Itoa(maxCon)+`;qu="concurrent-requests"`)
	hdr.Set("RateLimit", `"concurrency";r=0`)
	metrics.rejections.WithLabelValues("concurrency").Inc()
	e := newError(http.StatusTooManyRequests, "too_many_concurrent_requests", "",
		fmt.Sprintf("this account already runs %d generations, the most it may run at once; no credit was charged; retry when one has finished", maxCon))
	e.RetryAfter = time.Second
	e.kind = "concurrency"
	return e
}
