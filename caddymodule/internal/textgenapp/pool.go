package textgenapp

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// ErrNotOpen is returned by a Ref whose resource has not been opened yet: the textgen app opens
// it in Start, which `caddy validate` never calls, and a request may reach a handler in the
// moment between the HTTP app's start and this app's.
var ErrNotOpen = errors.New("not open yet")

// pooled is one resource in a caddy.UsagePool: it is created unopened when the first module of
// a config asks for it, opened once by the first Start (or by Acquire), shared by every module
// and config that names it, and closed by the destructor when the last of them lets go.
type pooled[T any] struct {
	name  string // the pool key, for messages
	open  func() (T, error)
	close func(T) error
	// retryable, when set, tells a failed open that will succeed by itself later (a database
	// that is not reachable yet, a Badger directory whose log needs space to be replayed): the
	// config starts anyway, requests are answered "not open yet" (503), and the open is retried
	// in the background until it succeeds.
	retryable func(error) bool
	log       *zap.Logger

	mu        sync.Mutex            // serialises open and close
	val       atomic.Pointer[T]     // nil until opened; read on every request without a lock
	openErr   atomic.Pointer[error] // why the last retryable open failed, while it is retried
	retrying  chan struct{}         // closed to stop the background retries; nil when none run
	destroyed bool
}

// retryEvery is the pause between two background attempts to open a resource.
var retryEvery = 2 * time.Second

// get returns the resource, or ErrNotOpen.
func (p *pooled[T]) get() (T, error) {
	if v := p.val.Load(); v != nil {
		return *v, nil
	}
	var zero T
	if e := p.openErr.Load(); e != nil {
		return zero, fmt.Errorf("%s: %w: %w", p.name, ErrNotOpen, *e)
	}
	return zero, fmt.Errorf("%s: %w", p.name, ErrNotOpen)
}

// ensureOpen opens the resource unless it is open. A failed open is tried again by the next
// call (the next config load), never cached.
func (p *pooled[T]) ensureOpen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.val.Load() != nil || p.retrying != nil {
		return nil
	}
	v, err := p.open()
	if err != nil {
		if p.retryable == nil || !p.retryable(err) || p.destroyed {
			return err
		}
		p.openErr.Store(&err)
		p.retrying = make(chan struct{})
		go p.retry(p.retrying, retryEvery)
		p.log.Error("cannot be opened at start: requests are answered 503 until it is; retrying in the background",
			zap.String("resource", p.name), zap.Error(err))
		return nil
	}
	p.val.Store(&v)
	return nil
}

// retry tries to open the resource every interval until it opens or stop is closed.
func (p *pooled[T]) retry(stop chan struct{}, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		if p.destroyed {
			p.mu.Unlock()
			return
		}
		v, err := p.open()
		if err == nil {
			p.val.Store(&v)
			p.openErr.Store(nil)
			p.retrying = nil
			p.mu.Unlock()
			p.log.Info("opened after all", zap.String("resource", p.name))
			return
		}
		p.openErr.Store(&err)
		p.mu.Unlock()
	}
}

// alive holds every pooled resource (as a key) from its creation until its Destruct has
// returned: a caddy.UsagePool forgets an entry before it destructs it, and the process's exit
// must wait for a ledger's close in progress (closeLedgersAtExit).
var alive sync.Map

// Destruct closes the resource if it was opened (caddy.Destructor).
func (p *pooled[T]) Destruct() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer alive.Delete(p)
	p.destroyed = true
	if p.retrying != nil {
		close(p.retrying)
		p.retrying = nil
	}
	v := p.val.Swap(nil)
	if v == nil {
		return nil
	}
	return p.close(*v)
}

// Ref is one module's share of a pooled resource. Release it exactly once.
type Ref[T any] struct {
	pool *caddy.UsagePool
	key  string
	p    *pooled[T]
	once sync.Once
}

// Key is the resource's pool key (a ledger's absolute directory, a backend's configuration).
func (r *Ref[T]) Key() string { return r.key }

// Get returns the resource once it is open, else an error wrapping ErrNotOpen.
func (r *Ref[T]) Get() (T, error) { return r.p.get() }

// Open opens the resource now unless it is open (the app's Start, and callers outside a
// config such as tests).
func (r *Ref[T]) Open() error { return r.p.ensureOpen() }

// Release gives the share back; the last one closes the resource. Safe on a nil Ref and when
// called twice.
func (r *Ref[T]) Release() error {
	if r == nil {
		return nil
	}
	var err error
	r.once.Do(func() { _, err = r.pool.Delete(r.key) })
	return err
}

// acquire joins the pooled resource under key or creates it unopened (retryable: see pooled).
func acquire[T any](pool *caddy.UsagePool, key string, open func() (T, error), close func(T) error,
	retryable func(error) bool, log *zap.Logger) (*Ref[T], error) {
	if log == nil {
		log = zap.NewNop()
	}
	v, _, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		p := &pooled[T]{name: key, open: open, close: close, retryable: retryable, log: log}
		alive.Store(p, struct{}{})
		return p, nil
	})
	if err != nil {
		return nil, err
	}
	p, ok := v.(*pooled[T])
	if !ok {
		_, _ = pool.Delete(key)
		return nil, fmt.Errorf("pool entry %s has type %T", key, v)
	}
	return &Ref[T]{pool: pool, key: key, p: p}, nil
}

// Interface guards
var _ caddy.Destructor = (*pooled[int])(nil)
