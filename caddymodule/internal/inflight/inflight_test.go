package inflight

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The Guard runs on virtual time (testing/synctest): synctest.Wait lets whatever Cleanup or
// Exit set going run until it blocks, so "not released while a request runs" is checked
// without a fixed wait, and a blocked Enter shows as the bubble's 10 s passing at once.
func TestReleaseWaitsForRunningRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var released atomic.Int32
		g := New(func() error { released.Add(1); return nil }, nil)
		if !g.Enter() {
			t.Fatal("Enter refused before Cleanup")
		}
		if err := g.Cleanup(); err != nil {
			t.Fatal(err)
		}
		// A request that reaches the replaced config while another still runs is refused at
		// once (this call would block the test, not fail it, if Enter waited for the release).
		if g.Enter() {
			t.Fatal("Enter let a request in after Cleanup")
		}
		// A running request keeps the resources.
		synctest.Wait()
		if released.Load() != 0 {
			t.Fatal("released while a request was running")
		}
		g.Exit()
		synctest.Wait()
		if released.Load() != 1 {
			t.Fatalf("released %d times after the last request ended, want once", released.Load())
		}
		// A late request is refused at once instead of blocking, and nothing is released twice.
		done := make(chan bool)
		go func() { done <- g.Enter() }()
		select {
		case ok := <-done:
			if ok {
				t.Fatal("Enter let a request in after the release")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Enter blocked after the release")
		}
		if err := g.Cleanup(); err != nil || released.Load() != 1 {
			t.Fatalf("second Cleanup: %v, released %d times", err, released.Load())
		}
	})
}

func TestReleaseAtOnceWhenIdle(t *testing.T) {
	n := 0
	g := New(func() error { n++; return nil }, nil)
	if err := g.Cleanup(); err != nil || n != 1 {
		t.Fatalf("idle Cleanup: %v, released %d times", err, n)
	}
	var nilGuard *Guard
	if err := nilGuard.Cleanup(); err != nil {
		t.Fatal(err)
	}
}
