package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Alerts are the HTTPS endpoints an account registers to receive events about itself, and the
// outbox of their deliveries. Enqueueing an event fans it out to one delivery per endpoint
// subscribed to its kind, in one durable step; senders on several instances claim due
// deliveries under a lease, as the e-mail outbox's do (mail.go). A delivery is kept after it
// ends (delivered or given up) for AlertKeep, so that the account holder sees what was sent.
type Alerts interface {
	// CreateAlertEndpoint registers e (ID and Created are set by the store) for e.AccountID
	// and returns it. SealedSecret is kept as given: the caller encrypts the signing secret.
	//
	// Expected errors:
	//   - ErrInvalidArgument: a URL that is not https:// or over 2048 bytes, an unknown event
	//     kind, an empty or oversized SealedSecret (CheckAlertEndpoint).
	//   - ErrNotFound: no account has e.AccountID.
	//   - ErrTooManyAlertEndpoints: the account has MaxAlertEndpoints already.
	//   - ErrClosed; ErrUnavailable.
	CreateAlertEndpoint(ctx context.Context, e AlertEndpoint) (AlertEndpoint, error)

	// ListAlertEndpoints returns the account's endpoints, oldest first (none: empty).
	//
	// Expected errors: ErrClosed; ctx's error.
	ListAlertEndpoints(ctx context.Context, accountID string) ([]AlertEndpoint, error)

	// DeleteAlertEndpoint deletes the account's endpoint id and every delivery to it, pending
	// or kept. A sender that holds one of them may still deliver it; its mark then returns
	// ErrNotFound.
	//
	// Expected errors:
	//   - ErrNotFound: the account has no endpoint id.
	//   - ErrClosed.
	DeleteAlertEndpoint(ctx context.Context, accountID, id string) error

	// EnqueueAlertEvent queues ev for every endpoint of ev.AccountID subscribed to ev.Kind,
	// due now, and returns how many deliveries it queued. A delivery is one per endpoint and
	// event id: an event enqueued again with the same ID (a crossing seen by two instances) is
	// not queued twice while the first delivery is kept. It also deletes the account's ended
	// deliveries older than AlertKeep.
	//
	// Expected errors:
	//   - ErrInvalidArgument: an unknown kind, an empty or over-64-byte id, a payload that is
	//     empty or over MaxAlertPayload.
	//   - ErrClosed; ErrUnavailable.
	EnqueueAlertEvent(ctx context.Context, ev AlertEvent) (int, error)

	// ClaimAlertDeliveries leases up to max pending deliveries that are due (NextAttempt
	// passed, no live lease) for lease, oldest due first, counting an attempt each, and
	// returns them with a fresh Claim and their endpoint's URL and SealedSecret. A delivery
	// leased by one caller is not returned to another until its lease has run out, across
	// instances sharing the store.
	//
	// Expected errors:
	//   - ErrInvalidArgument: lease or max is not positive.
	//   - ErrClosed.
	ClaimAlertDeliveries(ctx context.Context, lease time.Duration, max int) ([]AlertDelivery, error)

	// MarkAlertDelivered ends delivery id as delivered (status: the receiver's HTTP status).
	//
	// Expected errors:
	//   - ErrNotFound: no pending delivery id is leased under claim.
	//   - ErrClosed.
	MarkAlertDelivered(ctx context.Context, id, claim string, status int) error

	// RetryAlertDelivery ends the lease of claim and makes the delivery due again at at,
	// noting the receiver's status (0: none, a network error) and why it failed (at most 512
	// bytes are kept).
	//
	// Expected errors: those of MarkAlertDelivered.
	RetryAlertDelivery(ctx context.Context, id, claim string, at time.Time, status int, lastErr string) error

	// GiveUpAlertDelivery ends the delivery as failed: it is not tried again, and is kept to
	// be shown.
	//
	// Expected errors: those of MarkAlertDelivered.
	GiveUpAlertDelivery(ctx context.Context, id, claim string, status int, lastErr string) error

	// ListAlertDeliveries returns the account's deliveries, pending and kept, newest first
	// (by Created, then ID), at most limit (0: 50, at most 1000), without their Claim.
	//
	// Expected errors:
	//   - ErrInvalidArgument: limit is negative.
	//   - ErrClosed; ctx's error.
	ListAlertDeliveries(ctx context.Context, accountID string, limit int) ([]AlertDelivery, error)

	// AlertAccounts returns the accounts with an endpoint subscribed to any of kinds, in
	// account id order, at most limit (0: 50, at most 1000) after the account id after: what a
	// periodic check of those kinds reads, instead of every account.
	//
	// Expected errors:
	//   - ErrInvalidArgument: limit is negative.
	//   - ErrClosed; ctx's error.
	AlertAccounts(ctx context.Context, kinds []string, after string, limit int) ([]string, error)

	// NoteAlert marks the occurrence key (at most 200 bytes) of the account as raised, until
	// until (zero: for good), and reports whether it was not marked before. Of callers racing
	// to note one occurrence, across instances, exactly one sees changed: the one that raises
	// the alert. Marks past their until are forgotten.
	//
	// Expected errors:
	//   - ErrInvalidArgument: an empty or over-200-byte key.
	//   - ErrClosed; ErrUnavailable.
	NoteAlert(ctx context.Context, accountID, key string, until time.Time) (changed bool, err error)
}

// CheckAlertNote checks NoteAlert's key.
func CheckAlertNote(key string) error {
	if key == "" || len(key) > 200 || !utf8.ValidString(key) {
		return fmt.Errorf("alert note key: %w", ErrInvalidArgument)
	}
	return nil
}

// The kinds of alert events.
const (
	AlertBalanceLow        = "balance.low"        // available credits fell below the low-balance alert
	AlertKeyBudget80       = "key.budget_80"      // a key has spent 80% of one of its budgets
	AlertKeyBudget100      = "key.budget_100"     // a key has spent one of its budgets
	AlertMemberCapReached  = "member.cap_reached" // a member's monthly cap is used up
	AlertPurchaseCompleted = "purchase.completed" // a purchase was credited
	AlertRefundCreated     = "refund.created"     // a purchase was refunded (in part)
	AlertDisputeCreated    = "dispute.created"    // a purchase's payment was disputed
	AlertDisputeClosed     = "dispute.closed"     // a dispute was decided
	AlertTopupSucceeded    = "topup.succeeded"    // an automatic top-up was charged
	AlertTopupFailed       = "topup.failed"       // an automatic top-up could not be charged
)

// AlertKinds are every kind, in the order shown to users.
var AlertKinds = []string{AlertBalanceLow, AlertKeyBudget80, AlertKeyBudget100, AlertMemberCapReached,
	AlertPurchaseCompleted, AlertRefundCreated, AlertDisputeCreated, AlertDisputeClosed,
	AlertTopupSucceeded, AlertTopupFailed}

// Bounds of alerts.
const (
	MaxAlertEndpoints = 10       // per account
	MaxAlertURL       = 2048     // bytes of an endpoint's URL
	MaxAlertSecret    = 1024     // bytes of a sealed secret
	MaxAlertPayload   = 64 << 10 // bytes of one event's JSON
	AlertKeep         = 7 * 24 * time.Hour
)

// The states of a delivery.
const (
	AlertPending   = "pending"   // due, leased or waiting for a retry
	AlertDelivered = "delivered" // the receiver answered 2xx
	AlertFailed    = "failed"    // given up
)

// ErrTooManyAlertEndpoints: CreateAlertEndpoint for an account with MaxAlertEndpoints.
var ErrTooManyAlertEndpoints = errors.New("the account has the most alert endpoints allowed")

// AlertEndpoint is one HTTPS endpoint of an account.
type AlertEndpoint struct {
	ID        string `json:"id"`
	AccountID string `json:"account_id"`
	URL       string `json:"url"`
	// Kinds are the event kinds it receives; empty: all.
	Kinds []string `json:"kinds,omitempty"`
	// SealedSecret is the signing secret, encrypted by the caller.
	SealedSecret []byte    `json:"sealed_secret"`
	Created      time.Time `json:"created"`
}

// Wants reports whether the endpoint receives events of kind.
func (e AlertEndpoint) Wants(kind string) bool {
	return len(e.Kinds) == 0 || slices.Contains(e.Kinds, kind)
}

// AlertEvent is one event to deliver to an account's endpoints.
type AlertEvent struct {
	AccountID string
	Kind      string
	// ID is stable for one occurrence (one crossing, one purchase), so that a repeat is
	// dropped by the store and by receivers.
	ID      string
	Payload []byte // the JSON body, as sent
}

// AlertDelivery is one event for one endpoint.
type AlertDelivery struct {
	ID          string    `json:"id"`
	AccountID   string    `json:"account_id"`
	EndpointID  string    `json:"endpoint_id"`
	EventID     string    `json:"event_id"`
	Kind        string    `json:"kind"`
	Payload     []byte    `json:"payload,omitempty"`
	Created     time.Time `json:"created"`
	State       string    `json:"state"`
	Attempts    int       `json:"attempts"`
	NextAttempt time.Time `json:"next_attempt"`
	LeaseUntil  time.Time `json:"lease_until,omitzero"`
	Claim       string    `json:"claim,omitempty"`
	LastStatus  int       `json:"last_status,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	Finished    time.Time `json:"finished,omitzero"`
	// URL and SealedSecret are the endpoint's, set by ClaimAlertDeliveries only.
	URL          string `json:"-"`
	SealedSecret []byte `json:"-"`
}

// CheckAlertEndpoint checks what CreateAlertEndpoint is given, and normalises Kinds (sorted,
// no repeats; every kind listed is the same as none).
func CheckAlertEndpoint(e *AlertEndpoint) error {
	if len(e.URL) > MaxAlertURL || !utf8.ValidString(e.URL) {
		return fmt.Errorf("alert endpoint URL: %w", ErrInvalidArgument)
	}
	u, err := url.Parse(e.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("alert endpoint URL must be https://host/...: %w", ErrInvalidArgument)
	}
	kinds := slices.Clone(e.Kinds)
	slices.Sort(kinds)
	kinds = slices.Compact(kinds)
	for _, k := range kinds {
		if !slices.Contains(AlertKinds, k) {
			return fmt.Errorf("alert event kind %q: %w", TruncateUTF8(k, 40), ErrInvalidArgument)
		}
	}
	if len(kinds) == len(AlertKinds) {
		kinds = nil
	}
	e.Kinds = kinds
	if len(e.SealedSecret) == 0 || len(e.SealedSecret) > MaxAlertSecret {
		return fmt.Errorf("alert endpoint secret: %w", ErrInvalidArgument)
	}
	return nil
}

// CheckAlertEvent checks what EnqueueAlertEvent is given.
func CheckAlertEvent(ev AlertEvent) error {
	if !slices.Contains(AlertKinds, ev.Kind) {
		return fmt.Errorf("alert event kind %q: %w", TruncateUTF8(ev.Kind, 40), ErrInvalidArgument)
	}
	if ev.ID == "" || len(ev.ID) > 64 || !utf8.ValidString(ev.ID) {
		return fmt.Errorf("alert event id: %w", ErrInvalidArgument)
	}
	if len(ev.Payload) == 0 || len(ev.Payload) > MaxAlertPayload {
		return fmt.Errorf("alert event of %d bytes: %w", len(ev.Payload), ErrInvalidArgument)
	}
	return nil
}

// CheckAlertEndpointID refuses, before any store access, an id that no endpoint can have.
func CheckAlertEndpointID(id string) error {
	if !strings.HasPrefix(id, "whe_") || len(id) > 64 {
		return fmt.Errorf("alert endpoint %q: %w", TruncateUTF8(id, 64), ErrNotFound)
	}
	return nil
}

// NewAlertEndpointID orders an account's endpoints by when they were made.
func NewAlertEndpointID(t time.Time) string {
	return fmt.Sprintf("whe_%016x%s", t.UnixNano(), RandomBase62(8))
}

// AlertDeliveryID is the id of event eventID's delivery to endpoint: the same event enqueued
// twice makes the same delivery.
func AlertDeliveryID(endpointID, eventID string) string {
	d := sha256.Sum256([]byte(endpointID + "\x00" + eventID))
	return "whd_" + hex.EncodeToString(d[:12])
}

// AlertDeliveryOrder sorts deliveries newest first, as ListAlertDeliveries returns them.
func AlertDeliveryOrder(a, b AlertDelivery) int {
	if c := b.Created.Compare(a.Created); c != 0 {
		return c
	}
	return strings.Compare(b.ID, a.ID)
}
