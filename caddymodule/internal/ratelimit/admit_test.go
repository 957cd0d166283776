package ratelimit

import (
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/redistest"
)

// TestAdmit runs Admit in memory and in a real Redis: a required place that is full refuses the
// request and counts nothing; an optional place that is full is left out; a gate (Peek) refuses
// an identity with nothing left and charges nothing.
func TestAdmit(t *testing.T) {
	srv := redistest.New(t)
	for name, s := range map[string]*Shared{"memory": nil, "redis": openStore(t, srv)} {
		t.Run(name, func(t *testing.T) {
			l := Limit{Requests: 10, Window: time.Hour, Burst: 10}
			key := NewShared(s, name+"key", l, 0)
			gate := NewShared(s, name+"gate", Limit{Requests: 2, Window: time.Hour, Burst: 2}, 0)
			acct, hosts := NewSlots(s, name+"acct", time.Minute), NewSlots(s, name+"hosts", time.Minute)
			defer acct.Close()
			defer hosts.Close()
			reqs := []Request{{Buckets: key, ID: "k"}, {Buckets: gate, ID: "addr", Peek: true}}
			places := []Place{{Slots: acct, ID: "a", Max: 1}, {Slots: hosts, ID: "h", Max: 1, Optional: true}}
			states, slots := make([]State, 2), make([]Slot, 2)

			if d, _ := Admit(ctx, t0, reqs, places, states, slots); d != -1 || slots[0] == (Slot{}) || slots[1] == (Slot{}) {
				t.Fatalf("first: denied %d, slots %+v", d, slots)
			}
			if states[0].Remaining != 9 {
				t.Fatalf("key state %+v, want 9 left", states[0])
			}
			held := slots
			slots = make([]Slot, 2)
			// The account's place is taken: refused (index len(reqs)+0), nothing counted.
			if d, w := Admit(ctx, t0, reqs, places, states, slots); d != 2 || w <= 0 {
				t.Fatalf("account full: denied %d, wait %v; want 2", d, w)
			}
			held[0].Release()
			waitFor(t, "the account's place", func() bool { return acct.Running(ctx, "a") == 0 })
			// The host's place is still taken: admitted without it.
			if d, _ := Admit(ctx, t0, reqs, places, states, slots); d != -1 || slots[0] == (Slot{}) || slots[1] != (Slot{}) {
				t.Fatalf("host full: denied %d, slots %+v; want admitted without the host's place", d, slots)
			}
			if states[0].Remaining != 8 {
				t.Fatalf("key state %+v, want 8 left: the refused request counted", states[0])
			}
			slots[0].Release()
			held[1].Release()
			// The gate: two failures charged, then the address is refused; the peeks charged
			// nothing (else it would have been refused before).
			for range 2 {
				if _, ok, _ := gate.Take(ctx, "addr", t0); !ok {
					t.Fatal("a failure could not be charged: the peeks charged the gate")
				}
			}
			if d, w := Admit(ctx, t0, reqs[:2], nil, states, nil); d != 1 || w <= 0 {
				t.Fatalf("gate: denied %d wait %v, want 1", d, w)
			}
		})
	}
}

func openStore(t *testing.T, srv *redistest.Server) *Shared {
	s, err := OpenShared(srv.URL(0), SharedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
