package webarea

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/inflight"
	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// Area is the running part of a web area: its shares of the ledger and of the limits store,
// taken in Provision and opened by the textgen app's Start (which `caddy validate` never
// calls), its pages, built at that start, and the gate that keeps the shares until the last
// request of the area's config has ended (internal/inflight).
type Area struct {
	// App is the textgen app of the config.
	App *textgenapp.App
	// Ledger is the area's share of its ledger.
	Ledger *textgenapp.LedgerRef
	// Limits keeps the area's throttles in Redis; nil: in memory.
	Limits *ratelimit.Shared

	module   string
	prefix   string
	storeKey string // the share of the limits store, if any
	inFlight *inflight.Guard
	pages    atomic.Pointer[http.Handler] // nil until the app has started

	mu   sync.Mutex
	stop func() // what start left to undo; nil for nothing
}

// Provision sets the defaults of s and checks them with validate (the area's own Validate,
// which checks s with the rest), then takes the area's shares of the ledger and of the limits
// store s names. What it took is given back when it fails.
func Provision(ctx caddy.Context, s Settings, validate func() error) (*Area, error) {
	s.SetDefaults()
	if err := validate(); err != nil {
		return nil, err
	}
	logger := ctx.Logger()
	a := &Area{module: s.Module, prefix: *s.PathPrefix}
	a.inFlight = inflight.New(a.release, logger)
	err := a.take(ctx, s, logger)
	if err != nil {
		_ = a.inFlight.Cleanup()
		return nil, fmt.Errorf("%s: %w", s.Module, err)
	}
	return a, nil
}

func (a *Area) take(ctx caddy.Context, s Settings, logger *zap.Logger) error {
	var err error
	if a.App, err = textgenapp.From(ctx); err != nil {
		return err
	}
	if a.Ledger, err = a.App.Ledger(*s.Ledger, badgerledger.Options{Logger: logger.Named("ledger")}); err != nil {
		return err
	}
	if *s.LimitsStore != "" {
		if a.Limits, a.storeKey, err = textgenapp.LimitsStore(*s.LimitsStore, logger.Named("limits")); err != nil {
			return err
		}
	}
	return nil
}

// OnStart builds the area's pages when the textgen app starts, with the ledger open: start
// returns them and what to undo when the area is released (a registration to withdraw, a
// sender to stop; nil for nothing). Until then the area answers 503.
func (a *Area) OnStart(start func(store ledger.Store) (pages http.Handler, stop func(), err error)) {
	a.App.OnStart(func() error {
		store, err := a.Ledger.Get()
		if err != nil {
			return fmt.Errorf("%s: %w", a.module, err)
		}
		pages, stop, err := start(store)
		if err != nil {
			return fmt.Errorf("%s: %w", a.module, err)
		}
		a.mu.Lock()
		a.stop = stop
		a.mu.Unlock()
		a.pages.Store(&pages)
		return nil
	})
}

// ServeHTTP serves the area's pages under its path prefix and passes other paths on.
func (a *Area) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	return a.inFlight.ServeArea(w, r, next, a.prefix, func() http.Handler {
		if p := a.pages.Load(); p != nil {
			return *p
		}
		return nil
	})
}

// Cleanup gives the shares back once the last request of this config has ended. It is safe
// on a nil Area (a Provision that failed).
func (a *Area) Cleanup() error {
	if a == nil {
		return nil
	}
	return a.inFlight.Cleanup()
}

// release undoes what start left, then gives back the limits store and the ledger; the gate
// calls it once.
func (a *Area) release() error {
	a.mu.Lock()
	stop := a.stop
	a.mu.Unlock()
	if stop != nil {
		stop()
	}
	if a.storeKey != "" {
		textgenapp.ReleaseLimitsStore(a.storeKey)
	}
	return a.Ledger.Release()
}
