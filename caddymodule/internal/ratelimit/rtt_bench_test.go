package ratelimit

import (
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/redistest"
)

// BenchmarkRedisRoundTrip puts the cost of one Admit in Redis (two buckets and a place, then the
// place given back in the background) beside the machine's floor, a PING, in one run.
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
	b.Run("ping", func(b *testing.B) {
		for range b.N {
			s.Ping(ctx)
		}
	})
	b.Run("admit", func(b *testing.B) {
		states := make([]State, 2)
		slots := make([]Slot, 1)
		for range b.N {
			Admit(ctx, t0, []Request{{Buckets: k, ID: "key"}, {Buckets: a, ID: "acct"}}, []Place{{Slots: sl, ID: "acct", Max: 1 << 20}}, states, slots)
			slots[0].Release()
		}
	})
}

// BenchmarkRedisScriptParts: the Admit script with one bucket, with one place, and redis_rate's
// own script for one bucket: on one machine they cost about the same, a script's fixed cost.
func BenchmarkRedisScriptParts(b *testing.B) {
	srv := redistest.New(b)
	s, err := OpenShared(srv.URL(0), SharedOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l := Limit{Requests: 1 << 30, Window: time.Minute, Burst: 1 << 30}
	k := NewShared(s, "k", l, 0)
	sl := NewSlots(s, "acct", 0)
	defer sl.Close()
	states := make([]State, 2)
	slots := make([]Slot, 1)
	b.Run("one-bucket", func(b *testing.B) {
		for range b.N {
			Admit(ctx, t0, []Request{{Buckets: k, ID: "key"}}, nil, states, nil)
		}
	})
	b.Run("place-only", func(b *testing.B) {
		for range b.N {
			Admit(ctx, t0, nil, []Place{{Slots: sl, ID: "acct", Max: 1 << 20}}, states, slots)
		}
	})
	b.Run("redis_rate-allow", func(b *testing.B) {
		for range b.N {
			k.Take(ctx, "key2", t0)
		}
	})
}
