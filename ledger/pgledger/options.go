package pgledger

import (
	"cmp"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// PostgresOptions configures OpenPostgres. The zero value is a production configuration.
// Connection settings (host, database, user, TLS, pool size with pool_max_conns...) are in the
// URL given to OpenPostgres, as pgxpool reads them.
type PostgresOptions struct {
	// Now is the clock the store reads for every time it records or compares: hold, session
	// and token expiry, entry times, the 24 h of an Idempotency-Key. Default: time.Now. Tests
	// set it instead of sleeping.
	Now func() time.Time `json:"-"`

	// HoldTTL is how long a hold may stay open before a sweep voids it with reason "expired".
	// Default: DefaultHoldTTL (15 minutes), as for Badger.
	HoldTTL time.Duration `json:"hold_ttl,omitempty"`

	// SweepInterval is how often this instance voids the expired open holds of every instance
	// and drops expired sessions and Idempotency-Key records. Several instances may sweep: a
	// hold is voided once whichever sweeps it. Default: 30 seconds. A negative value disables
	// the sweep.
	SweepInterval time.Duration `json:"sweep_interval,omitempty"`

	// LastUsedFlushInterval is how often the API keys' last-use times that Hold noted in
	// memory are written to the database (also at Close). Default: 1 minute. A negative value
	// disables the periodic flush.
	LastUsedFlushInterval time.Duration `json:"last_used_flush_interval,omitempty"`

	// QueryTimeout bounds every call's time in the database, so that an unreachable database
	// gives ErrUnavailable instead of a hang. Default: 5 seconds.
	QueryTimeout time.Duration `json:"query_timeout,omitempty"`

	// HealthTimeout bounds Health's round trip to the database. Default: 2 seconds.
	HealthTimeout time.Duration `json:"health_timeout,omitempty"`

	// Logger receives the ledger's log messages. Default: zap.NewNop().
	Logger *zap.Logger `json:"-"`
}

// Defaults of PostgresOptions; see the field comments.
const (
	DefaultQueryTimeout  = 5 * time.Second
	DefaultHealthTimeout = 2 * time.Second
)

func (o PostgresOptions) withDefaults() (PostgresOptions, error) {
	if o.HoldTTL < 0 || o.QueryTimeout < 0 || o.HealthTimeout < 0 {
		return o, fmt.Errorf("hold_ttl, query_timeout and health_timeout must not be negative: %w", ledger.ErrInvalidArgument)
	}
	o.HoldTTL = cmp.Or(o.HoldTTL, ledger.DefaultHoldTTL)
	if o.Now == nil {
		o.Now = time.Now
	}
	o.SweepInterval = cmp.Or(o.SweepInterval, ledger.DefaultSweepInterval)
	o.LastUsedFlushInterval = cmp.Or(o.LastUsedFlushInterval, ledger.DefaultLastUsedFlushInterval)
	o.QueryTimeout = cmp.Or(o.QueryTimeout, DefaultQueryTimeout)
	o.HealthTimeout = cmp.Or(o.HealthTimeout, DefaultHealthTimeout)
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o, nil
}
