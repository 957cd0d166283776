package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports handed out lie outside the range the kernel takes outgoing connections' local
// ports from, are distinct, and can be bound on every interface once Pick has returned.
func TestPickOutsideEphemeralRange(t *testing.T) {
	first, last := ephemeralRange()
	ports, err := Pick(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p >= first && p <= last {
			t.Errorf("port %d lies in the ephemeral range %d-%d, where a client connection can take it", p, first, last)
		}
		if p < low || p > 65535 {
			t.Errorf("port %d outside %d-65535", p, low)
		}
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}

// A port some server holds is never handed out.
func TestPickSkipsHeldPorts(t *testing.T) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	taken := map[int]bool{}
	for range 200 {
		p, err := Pick(1)
		if err != nil {
			t.Fatal(err)
		}
		if taken[p[0]] {
			t.Fatalf("port %d handed out while a listener holds it", p[0])
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p[0]))
		if err != nil {
			t.Fatalf("port %d just picked is not free: %v", p[0], err)
		}
		held = append(held, l)
		taken[p[0]] = true
	}
}

func TestNth(t *testing.T) {
	ranges := []int{10, 12, 20, 21}
	var got []int
	for i := range 5 {
		got = append(got, nth(ranges, i))
	}
	want := []int{10, 11, 12, 20, 21}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("nth over %v = %v, want %v", ranges, got, want)
		}
	}
}
