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

// The admission queue needs a host that holds its requests until told otherwise: the fault
// server's stall (the real Ollama cannot be made to hold a request on demand).

func noEmit(string) error { return nil }

// holdOne starts a generation that stalls on the host until its context is cancelled.
func holdOne(t *testing.T, o *backends.Chat) (cancel func(), done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	ch := make(chan error, 1)
	go func() {
		_, err := o.Generate(ctx, backends.Request{Model: ollamatest.DefaultModel, Prompt: "hold"}, noEmit)
		ch <- err
	}()
	return cancel, ch
}

func TestAdmissionQueueFullAndTimeout(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall})
	o := newChat(t, backends.ChatConfig{Hosts: []string{fs.URL}, MaxInFlight: 1, QueueSize: 1, QueueTimeout: 200 * time.Millisecond})
	cancelHold, held := holdOne(t, o)
	waitFor(t, "the first request to be in flight", func() bool { return o.Hosts()[0].InFlight == 1 })

	queued := make(chan error, 1)
	go func() {
		_, err := o.Admit(testCtx(t))
		queued <- err
	}()
	waitFor(t, "the second request to queue", func() bool { return o.QueueLen() == 1 })

	// A third finds the queue full and is refused at once.
	_, err := o.Admit(testCtx(t))
	be := wantKind(t, err, backends.KindOverloaded)
	if !errors.Is(err, backends.ErrQueueFull) || be.RetryAfter <= 0 {
		t.Errorf("queue full: %v (retry %v)", err, be.RetryAfter)
	}
	// The queued one gives up after the queue timeout.
	err = <-queued
	be = wantKind(t, err, backends.KindOverloaded)
	if !errors.Is(err, backends.ErrQueueTimeout) || be.RetryAfter <= 0 {
		t.Errorf("queue timeout: %v", err)
	}
	if o.QueueLen() != 0 || fs.Requests() != 1 {
		t.Errorf("queue %d, server requests %d; want 0 and 1", o.QueueLen(), fs.Requests())
	}
	cancelHold()
	wantKind(t, <-held, backends.KindCanceled)
	if n := o.Hosts()[0].InFlight; n != 0 {
		t.Errorf("in flight %d after all ended", n)
	}
}

// TestAdmissionHandsOffInOrder: queued requests get the freed places first come, first served,
// and a newcomer does not overtake them.
func TestAdmissionHandsOffInOrder(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall})
	o := newChat(t, backends.ChatConfig{Hosts: []string{fs.URL}, MaxInFlight: 1, QueueSize: 8, QueueTimeout: time.Minute})
	first, err := o.Admit(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	order := make(chan int, n)
	slots := make(chan backends.Admission, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := o.Admit(testCtx(t))
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			slots <- s
		}()
		waitFor(t, "the request to queue", func() bool { return o.QueueLen() == i+1 })
	}
	if s := first; s.Waited() != 0 {
		t.Errorf("an unqueued admission reports a wait of %v", s.Waited())
	}
	first.Release()
	first.Release() // a second release is a no-op
	for i := 0; i < n; i++ {
		got := <-order
		if got != i {
			t.Fatalf("admission %d went to queued request %d", i, got)
		}
		s := <-slots
		if o.Hosts()[0].InFlight != 1 {
			t.Fatalf("in flight %d, want 1", o.Hosts()[0].InFlight)
		}
		s.Release()
	}
	wg.Wait()
	if o.Hosts()[0].InFlight != 0 || o.QueueLen() != 0 {
		t.Errorf("in flight %d, queue %d after all released", o.Hosts()[0].InFlight, o.QueueLen())
	}
}

// TestAdmissionSlotToGenerate: a slot taken by Admit is used and released by Generate; a
// cancelled wait leaves the queue.
func TestAdmissionSlotToGenerate(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "x "})
	o := newChat(t, backends.ChatConfig{Hosts: []string{fs.URL}, MaxInFlight: 1, QueueSize: 4})
	s, err := o.Admit(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	waited := make(chan error, 1)
	go func() {
		_, err := o.Admit(ctx)
		waited <- err
	}()
	waitFor(t, "the request to queue", func() bool { return o.QueueLen() == 1 })
	cancel()
	wantKind(t, <-waited, backends.KindCanceled)
	if o.QueueLen() != 0 {
		t.Errorf("a cancelled wait stayed in the queue")
	}

	var text string
	st, err := o.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "hi", Admission: s},
		func(p string) error { text += p; return nil })
	if err != nil || text != "x x x " || st.Pieces != 3 {
		t.Fatalf("generate with a slot: %v %q %+v", err, text, st)
	}
	if n := o.Hosts()[0].InFlight; n != 0 {
		t.Errorf("in flight %d after the generation: the slot was not released", n)
	}
	// Without a slot Generate admits by itself.
	if _, err := o.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, noEmit); err != nil {
		t.Fatal(err)
	}
}
