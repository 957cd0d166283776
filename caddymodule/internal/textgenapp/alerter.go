package textgenapp

import (
	"context"

	"github.com/caddy-textgen/textgen/ledger"
)

// Alert endpoints for the admin API: an endpoint's signing secret is sealed with My Account's
// key and its URL checked against My Account's alerts settings, so the admin API asks My
// Account of the same ledger to register one. My Account registers itself when it starts with
// alerts on and withdraws in its Cleanup; during a reload the newest registration answers.

// AlertEndpoints registers alert endpoints.
type AlertEndpoints interface {
	// AddAlertEndpoint registers url for the account's events of kinds (none: all) and
	// returns it with its signing secret, the only time the secret is told. A URL the alerts
	// settings refuse is ledger.ErrInvalidArgument, with a message that says why.
	AddAlertEndpoint(ctx context.Context, accountID, url string, kinds []string) (ledger.AlertEndpoint, string, error)
}

var alertEndpoints registry[AlertEndpoints]

// RegisterAlertEndpoints makes e register endpoints for store until the returned func is
// called.
func RegisterAlertEndpoints(store appLedger, e AlertEndpoints) (unregister func()) {
	return alertEndpoints.register(store, e)
}

// AlertEndpointsFor returns the newest registration for store, or nil.
func AlertEndpointsFor(store appLedger) AlertEndpoints { return alertEndpoints.newest(store) }
