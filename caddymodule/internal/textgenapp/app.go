// Package textgenapp is the Caddy app "textgen": the resources that the textgen handler, My
// Account and the admin API share (ledgers and model backends), pooled across config reloads and
// opened in the app's Start.
//
// A module asks for a resource in its Provision (App.Ledger, App.ModelServers) and gets a Ref
// that it releases in Cleanup. Nothing is opened during Provision: `caddy validate` provisions a
// config without starting it, and opening there would try to lock the Badger directory of the
// server that is running. Start opens what the config's modules asked for; on a reload the new
// config joins what the old one has open.
package textgenapp

import (
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

func init() {
	caddy.RegisterModule(App{})
}

// App opens the ledgers and backends that the textgen modules of a config use. It has no
// settings of its own: the modules name their resources in their own configuration.
type App struct {
	logger *zap.Logger
	// openers open the resources asked for by this config's modules, in the order asked.
	openers []func() error
	areas   *accountAreas // account.go; made in Provision
	prices  *toolPrices   // prices.go; made in Provision
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "textgen",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision sets up the app's logger.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.areas = &accountAreas{where: map[string]AccountArea{}}
	a.prices = &toolPrices{}
	return nil
}

// Start opens every resource the config's modules asked for (or joins it, when an earlier
// config has it open). A resource that cannot be opened fails the config.
func (a *App) Start() error {
	for _, open := range a.openers {
		if err := open(); err != nil {
			return err
		}
	}
	return nil
}

// Stop does nothing: each module releases its share in Cleanup, after its last request.
func (a *App) Stop() error { return nil }

// From returns the textgen app of the config being provisioned, creating it when the config
// does not name it.
func From(ctx caddy.Context) (*App, error) {
	v, err := ctx.App("textgen")
	if err != nil {
		return nil, err
	}
	app, ok := v.(*App)
	if !ok {
		return nil, fmt.Errorf("the textgen app is %T", v)
	}
	return app, nil
}

// Ledger returns a share of the ledger spec names, opened when the app starts: a Badger
// directory, or a PostgreSQL URL (postgres://...). Placeholders such as
// {env.TEXTGEN_DATABASE_URL} are resolved here, so a secret in the URL never appears in the
// config JSON.
func (a *App) Ledger(spec string, opts badgerledger.Options) (*LedgerRef, error) {
	spec = strings.TrimSpace(caddy.NewReplacer().ReplaceAll(spec, ""))
	if spec == "" {
		return nil, fmt.Errorf("ledger: a directory or a postgres:// URL is required (a placeholder resolved to nothing)")
	}
	ref, err := newLedgerRef(spec, opts)
	if err != nil {
		return nil, err
	}
	a.openers = append(a.openers, ref.Open)
	return ref, nil
}

// ModelServers returns a share of the model servers of cfg, started when the app starts. wire
// tells the settings of cfg.Wire apart: equal configs and wires share one client.
func (a *App) ModelServers(cfg backends.ChatConfig, wire string) (*ServersRef, error) {
	ref, err := newServersRef(cfg, wire)
	if err != nil {
		return nil, err
	}
	a.openers = append(a.openers, ref.Open)
	return ref, nil
}

// OnStart runs f when the app starts, after the resources asked for before it are open (a
// background check of the models a backend serves, say). An error fails the config.
func (a *App) OnStart(f func() error) { a.openers = append(a.openers, f) }

// Interface guards
var (
	_ caddy.App         = (*App)(nil)
	_ caddy.Provisioner = (*App)(nil)
)
