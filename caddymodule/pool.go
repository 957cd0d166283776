package caddymodule

import (
	"encoding/json"
	"fmt"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/ledger"
)

// Caddy provisions a new config before it stops the old one, and Badger locks its directory, so
// the ledger is opened once per directory and shared through a usage pool: a reload joins the
// open database, and the last handler to let go closes it. The pool (not a config context) owns
// the database's goroutines, so they live exactly as long as the database.
var ledgers = caddy.NewUsagePool()

type pooledLedger struct{ *ledger.Badger }

func (p pooledLedger) Destruct() error { return p.Badger.Close() }

// acquireLedger opens the ledger in dir or joins it if it is open. Release it with
// releaseLedger(key) exactly once.
func acquireLedger(dir string, opts ledger.Options) (*ledger.Badger, string, error) {
	abs, err := caddy.FastAbs(dir)
	if err != nil {
		return nil, "", fmt.Errorf("ledger directory %q: %w", dir, err)
	}
	val, _, err := ledgers.LoadOrNew(abs, func() (caddy.Destructor, error) {
		db, err := ledger.Open(abs, opts)
		if err != nil {
			return nil, fmt.Errorf("opening ledger %s: %w", abs, err)
		}
		return pooledLedger{db}, nil
	})
	if err != nil {
		return nil, "", err
	}
	return val.(pooledLedger).Badger, abs, nil
}

func releaseLedger(key string) error {
	_, err := ledgers.Delete(key)
	return err
}

// openLedgers returns the ledgers that are open in this process, keyed by directory. The admin
// API reaches the ledger this way, so it works whatever config loaded it.
func openLedgers() map[string]*ledger.Badger {
	out := map[string]*ledger.Badger{}
	ledgers.Range(func(k, v any) bool {
		if p, ok := v.(pooledLedger); ok {
			out[k.(string)] = p.Badger
		}
		return true
	})
	return out
}

// Backends are pooled by their configuration, so a config reload that keeps the Ollama settings
// keeps the same client, its connections, health state and counts of requests in flight, and the
// streams of the old config are never cut off by the new one.
var ollamas = caddy.NewUsagePool()

type pooledOllama struct{ *backends.Ollama }

func (p pooledOllama) Destruct() error { return p.Ollama.Close() }

func acquireOllama(cfg backends.OllamaConfig) (*backends.Ollama, string, error) {
	logger := cfg.Logger
	cfg.Logger = nil
	keyJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, "", err
	}
	cfg.Logger = logger
	key := string(keyJSON)
	val, _, err := ollamas.LoadOrNew(key, func() (caddy.Destructor, error) {
		o, err := backends.NewOllama(cfg)
		if err != nil {
			return nil, fmt.Errorf("ollama backend: %w", err)
		}
		return pooledOllama{o}, nil
	})
	if err != nil {
		return nil, "", err
	}
	return val.(pooledOllama).Ollama, key, nil
}

func releaseOllama(key string) error {
	_, err := ollamas.Delete(key)
	return err
}

// AcquireLedger opens the ledger in dir or joins it if it is open, for other modules of the
// plugin (the account area) that share it with the generate handler. Release it with
// ReleaseLedger(key) exactly once, in Cleanup.
func AcquireLedger(dir string, opts ledger.Options) (*ledger.Badger, string, error) {
	return acquireLedger(dir, opts)
}

// ReleaseLedger gives back a ledger taken with AcquireLedger; the last user closes it.
func ReleaseLedger(key string) error { return releaseLedger(key) }
