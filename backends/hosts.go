package backends

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// chatHost is one model server of a backend and its runtime state.
type chatHost struct {
	name    string   // url.String(), as reported in errors, stats and logs
	base    *url.URL // as ParseOllamaHost read it: the wire's addresses are under it
	chatURL string   // where chat requests go (Wire.ChatURL)
	// lean are the idle connections of the chat streams, when they do not go through the
	// Transport (conn.go): nil for https:// hosts and proxied ones.
	lean *leanConns

	inFlight atomic.Int64
	healthy  atomic.Bool

	mu      sync.Mutex
	lastErr string
	since   time.Time // when healthy last changed
}

// host is h as the wire sees it.
func (c *Chat) host(h *chatHost) Host {
	return Host{Name: h.name, Base: h.base, Client: c.client, Log: c.log}
}

// HostStatus is a host's state, for readiness endpoints and admin views.
type HostStatus struct {
	URL       string    `json:"url"`
	Healthy   bool      `json:"healthy"`
	InFlight  int       `json:"in_flight"`
	LastError string    `json:"last_error,omitempty"` // why it was last marked down
	Since     time.Time `json:"since,omitzero"`       // when Healthy last changed; zero: never
}

// Hosts reports every host's state, in configuration order.
func (c *Chat) Hosts() []HostStatus {
	out := make([]HostStatus, len(c.hosts))
	for i, h := range c.hosts {
		h.mu.Lock()
		out[i] = HostStatus{
			URL:       h.name,
			Healthy:   h.healthy.Load(),
			InFlight:  int(h.inFlight.Load()),
			LastError: h.lastErr,
			Since:     h.since,
		}
		h.mu.Unlock()
	}
	return out
}

// Check probes every host now (the wire's probe), updates their health and returns nil if at
// least one answers, else an error naming each host's failure. A readiness endpoint can call it.
func (c *Chat) Check(ctx context.Context) error {
	errs := c.probeAll(ctx)
	if len(errs) < len(c.hosts) {
		return nil
	}
	return fmt.Errorf("no model server host answers: %w", errors.Join(errs...))
}

// down marks h unhealthy after a failed connection; the health checker brings it back.
func (h *chatHost) down(log *zap.Logger, err error) {
	h.mu.Lock()
	h.lastErr = err.Error()
	was := h.healthy.Swap(false)
	if was {
		h.since = time.Now()
	}
	h.mu.Unlock()
	if was {
		log.Warn("model server host is down; sending requests to other hosts until it answers again",
			zap.String("host", h.name), zap.Error(err))
	}
}

// up marks h healthy after it answered.
func (h *chatHost) up(log *zap.Logger) {
	if h.healthy.Load() {
		return // the common case costs one atomic load
	}
	h.mu.Lock()
	was := h.healthy.Swap(true)
	if !was {
		h.since = time.Now()
	}
	h.mu.Unlock()
	if !was {
		log.Info("model server host is back", zap.String("host", h.name))
	}
}

func (c *Chat) healthLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.HealthInterval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.stop
		cancel()
	}()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.probeAll(ctx)
			for _, h := range c.hosts {
				if h.lean != nil {
					h.lean.sweep(now)
				}
			}
		}
	}
}

// probeAll probes every host concurrently and returns the errors of those that failed.
func (c *Chat) probeAll(ctx context.Context) []error {
	errs := make([]error, len(c.hosts))
	var wg sync.WaitGroup
	for i, h := range c.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A probe is one small round trip; allow a connection plus as much again.
			pctx, cancel := context.WithTimeout(ctx, 2*c.cfg.ConnectTimeout)
			defer cancel()
			if err := c.wire.Probe(pctx, c.host(h)); err != nil {
				errs[i] = fmt.Errorf("%s: %w", h.name, err)
				if ctx.Err() == nil { // else we are shutting down: no verdict on the host
					h.down(c.log, err)
				}
				return
			}
			h.up(c.log)
		}()
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	return failed
}
