package ratelimit

import (
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/redistest"
)

// BenchmarkRedisRoundTrip puts the cost of one Admit in Redis (two buckets and a place, then the
// place given back in the background) beside the machine's floor, a PING, and beside the parts
// of the script (one bucket, one place) and redis_rate's own one-bucket script, in one run: on
// one machine the scripts cost about the same, a script call's fixed cost.
func BenchmarkRedisRoundTrip(b *testing.B) {
	srv := redistest.New(b)
	s, err := OpenShared(srv.URL(0), SharedOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l := Limit{Requests: 1 << 30, Window: time.Minute, Burst: 1 << 30}
	k, a := NewShared(s, "k", l, 0), NewShared(s, "a", l, 0)
	sl := NewSlots(s, "acct", 0)
	defer sl.Close()
	states := make([]State, 2)
	slots := make([]Slot, 1)
	place := []Place{{Slots: sl, ID: "acct", Max: 1 << 20}}
	for _, bm := range []struct {
		name string
		op   func()
	}{
		{"ping", func() { s.Ping(ctx) }},
		{"admit", func() {
			Admit(ctx, t0, []Request{{Buckets: k, ID: "key"}, {Buckets: a, ID: "acct"}}, place, states, slots)
			slots[0].Release()
		}},
		{"one-bucket", func() { Admit(ctx, t0, []Request{{Buckets: k, ID: "key"}}, nil, states, nil) }},
		{"one-place", func() {
			Admit(ctx, t0, nil, place, states, slots)
			slots[0].Release()
		}},
		{"redis_rate-allow", func() { k.Take(ctx, "key2", t0) }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			for range b.N {
				bm.op()
			}
		})
	}
}
