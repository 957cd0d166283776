package account

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// Alerts to the customer's own systems: an account registers HTTPS endpoints (alerts_page.go,
// the admin API) for events about it. raiseAlert queues an event in the ledger, which fans it
// out to one delivery per subscribed endpoint; the alert sender (alerts_sender.go) signs and
// POSTs each one, retrying with back-off for a day. The e-mail alerts are unchanged.

// Alerts is the alerts block of textgen_account.
type Alerts struct {
	// Off turns alerts off: no endpoints can be registered, and no event is queued or sent.
	Off bool `json:"off,omitempty"`
	// AllowPrivateEndpoints lets endpoints be on private, loopback and reserved addresses
	// (an operator's own receiver on its network). Default: refused, so that an account holder
	// cannot make the server call into the operator's network.
	AllowPrivateEndpoints bool `json:"allow_private_endpoints,omitempty"`
}

// alerter is what the account area needs to take and send alerts.
type alerter struct {
	// sealer seals the endpoints' signing secrets (the mail key).
	sealer       *sealing.Sealer
	allowPrivate bool
	// roots checks the receivers' certificates; nil: the system's roots. Only tests set it,
	// to trust their own receiver.
	roots *x509.CertPool
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// startAlerter loads the key that seals the endpoints' secrets: mail_key, else the key file of
// Caddy's data directory that queued e-mail and kept generations use. It runs in the textgen
// app's Start, which `caddy validate` never calls.
func (h *Handler) startAlerter() (*alerter, error) {
	key, err := sealing.Key{Setting: "mail_key", Value: h.MailKey, File: "retention.key", User: "alerts",
		Seals: "the alert endpoints' signing secrets", Without: "set alerts off"}.Load(h.logger, textgenapp.LedgerShared(h.Ledger))
	if err != nil {
		return nil, err
	}
	s, err := sealing.New(key)
	if err != nil {
		return nil, fmt.Errorf("mail_key: %w", err)
	}
	return &alerter{sealer: s, allowPrivate: h.Alerts != nil && h.Alerts.AllowPrivateEndpoints, roots: alertTestRoots}, nil
}

// alertTestRoots is the test-only hook through which tests of this package make an area that a
// Caddyfile started trust their own receiver's certificate; nil in the product, where the
// system's roots check every receiver.
var alertTestRoots *x509.CertPool

// unmarshalCaddyfile reads `alerts off` or `alerts { allow_private_endpoints }`.
func (al *Alerts) unmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		if d.Val() != "off" || d.NextArg() {
			return d.Errf("alerts takes off or a block, not %q", d.Val())
		}
		al.Off = true
		if d.NextBlock(d.Nesting()) {
			return d.Err("alerts off takes no block")
		}
		return nil
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "allow_private_endpoints":
			if d.NextArg() {
				return d.Errf("alerts: allow_private_endpoints takes no argument")
			}
			al.AllowPrivateEndpoints = true
		default:
			return d.Errf("alerts: unknown subdirective %q", d.Val())
		}
	}
	return nil
}

// alertEvent is the JSON body every endpoint receives.
type alertEvent struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"` // unix seconds
	Account string `json:"account"`
	Data    any    `json:"data"`
}

// alertSecretAD binds a sealed signing secret to its account.
func alertSecretAD(acct string) []byte { return []byte("textgen-alert-secret\x00" + acct) }

// newAlertSecret makes a signing secret, shown once to the account holder.
func newAlertSecret() string { return "whsec_" + ledger.RandomBase62(32) }

// alertEventID is the event id of one occurrence of kind, named by key (a Stripe event or
// object id, a crossing's account and period): the same occurrence seen twice, by two
// instances or two webhook deliveries, has one id, and is delivered once.
func alertEventID(kind, key string) string {
	d := sha256.Sum256([]byte(kind + "\x00" + key))
	return "evt_" + hex.EncodeToString(d[:12])
}

// signAlert is the Textgen-Signature header of body sent at t: t=<unix seconds>,v1=<hex of
// HMAC-SHA256 with the secret over "<t>.<body>">.
func signAlert(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// raiseAlert queues an event of kind for the account's endpoints that subscribe to it. key
// names the occurrence (see alertEventID); data is the event's "data" object. It is meant for
// every place that learns of an event (automatic top-ups among them); it never fails the
// caller's work: a failure is logged and returned for callers that care.
func (a *app) raiseAlert(ctx context.Context, accountID, kind, key string, data any) error {
	if a.alerts == nil {
		return nil
	}
	id := alertEventID(kind, key)
	body, err := json.Marshal(alertEvent{ID: id, Type: kind, Created: now().Unix(), Account: accountID, Data: data})
	if err == nil {
		_, err = a.store.EnqueueAlertEvent(context.WithoutCancel(ctx), ledger.AlertEvent{AccountID: accountID, Kind: kind, ID: id, Payload: body})
	}
	if err != nil {
		a.logger.Error("queueing an alert", zap.String("account", accountID), zap.String("kind", kind), zap.String("event", id), zap.Error(err))
		return fmt.Errorf("queueing alert %s: %w", kind, err)
	}
	select {
	case a.alerts.wake <- struct{}{}:
	default:
	}
	return nil
}
