package backends_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

// sharedCount is a HostCounter held in this process, standing in for the Redis one that
// caddy-textgen uses (tested with a real Redis in caddymodule): two backends sharing it are two
// instances sending to the same hosts.
type sharedCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *sharedCount) Take(_ context.Context, host string, max int) (func(), bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[host] >= max {
		return nil, false
	}
	c.n[host]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.n[host]--
			c.mu.Unlock()
		})
	}, true
}

func (c *sharedCount) String() string { return "test" }

func (c *sharedCount) get(host string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[host]
}

// TestSharedMaxInFlight: two backends sharing a HostCounter hold max_in_flight for the host
// together: the second waits while the first fills the host, gets the place the first gives
// back, and without a queue is refused at once.
func TestSharedMaxInFlight(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall})
	hc := &sharedCount{n: map[string]int{}}
	cfg := backends.ChatConfig{Hosts: []string{fs.URL}, MaxInFlight: 2, QueueSize: 4, QueueTimeout: time.Minute, HostCounter: hc}
	a, b := newChat(t, cfg), newChat(t, cfg)
	a1, err := a.Admit(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := a.Admit(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan backends.Admission, 1)
	go func() {
		s, err := b.Admit(testCtx(t))
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	select {
	case <-got:
		t.Fatal("the second instance got a place on a host the first fills")
	case <-time.After(200 * time.Millisecond): // it waits: a negative check, not a speed check
	}
	a1.Release()
	s := <-got
	if n := hc.get(fs.URL); n != 2 {
		t.Fatalf("%d places counted across both, want 2", n)
	}
	s.Release()
	a2.Release()
	if n := hc.get(fs.URL); n != 0 {
		t.Fatalf("%d places counted after every release", n)
	}

	// Without a queue: refused at once while the other instance fills the host.
	cfg.QueueSize = 0
	c := newChat(t, cfg)
	x1, _ := a.Admit(testCtx(t))
	x2, _ := a.Admit(testCtx(t))
	_, err = c.Admit(testCtx(t))
	wantKind(t, err, backends.KindOverloaded)
	x1.Release()
	x2.Release()
}

// TestSharedMaxInFlightOtherHost: a host full across the instances is skipped for another.
func TestSharedMaxInFlightOtherHost(t *testing.T) {
	fs1 := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall})
	fs2 := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall})
	hc := &sharedCount{n: map[string]int{}}
	// The other instance fills host 1 (it sends to host 1 only).
	a := newChat(t, backends.ChatConfig{Hosts: []string{fs1.URL}, MaxInFlight: 1, QueueSize: 1, QueueTimeout: time.Minute, HostCounter: hc})
	held, err := a.Admit(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	b := newChat(t, backends.ChatConfig{Hosts: []string{fs1.URL, fs2.URL}, MaxInFlight: 1, QueueSize: 1, QueueTimeout: time.Minute, HostCounter: hc})
	for range 3 { // whichever host b prefers, it lands on host 2
		s, err := b.Admit(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if hc.get(fs2.URL) != 1 || hc.get(fs1.URL) != 1 {
			t.Fatalf("places host1 %d host2 %d, want 1 and 1", hc.get(fs1.URL), hc.get(fs2.URL))
		}
		for _, h := range b.Hosts() {
			if h.URL == fs1.URL && h.InFlight != 0 {
				t.Fatalf("b counts a request on host 1, which is full across the instances")
			}
		}
		s.Release()
	}
	// Both hosts full across the instances: b times out in its queue.
	c, err := b.Admit(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	b2 := newChat(t, backends.ChatConfig{Hosts: []string{fs1.URL, fs2.URL}, MaxInFlight: 1, QueueSize: 1, QueueTimeout: 100 * time.Millisecond, HostCounter: hc})
	_, err = b2.Admit(testCtx(t))
	if !errors.Is(err, backends.ErrQueueTimeout) {
		t.Fatalf("both hosts full across the instances: %v, want a queue timeout", err)
	}
}
