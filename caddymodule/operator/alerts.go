package operator

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// An account's alert endpoints: GET /textgen/accounts/{id}/alerts (the endpoints and recent
// deliveries), POST /textgen/accounts/{id}/alerts (register one; its signing secret is in the
// answer, once) and POST /textgen/accounts/{id}/alerts/{eid}/delete. Changes are audited.

type alertEndpointRequest struct {
	URL   string   `json:"url"`
	Kinds []string `json:"kinds"`
}

type alertEndpointView struct {
	ID      string    `json:"id"`
	URL     string    `json:"url"`
	Kinds   []string  `json:"kinds"` // empty: all
	Created time.Time `json:"created"`
}

type alertDeliveryView struct {
	ID          string    `json:"id"`
	EndpointID  string    `json:"endpoint_id"`
	EventID     string    `json:"event_id"`
	Type        string    `json:"type"`
	Created     time.Time `json:"created"`
	State       string    `json:"state"`
	Attempts    int       `json:"attempts"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	LastStatus  int       `json:"last_status,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	Finished    time.Time `json:"finished,omitzero"`
}

func newAlertEndpointView(e ledger.AlertEndpoint) alertEndpointView {
	kinds := e.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	return alertEndpointView{ID: e.ID, URL: e.URL, Kinds: kinds, Created: e.Created}
}

func (adminAPI) listAlerts(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	id := r.PathValue("id")
	if _, err := store.GetAccount(r.Context(), id); err != nil {
		return accountError(err, id, "reading account %s", id)
	}
	eps, err := store.ListAlertEndpoints(r.Context(), id)
	if err != nil {
		return ledgerError(err, "listing the alert endpoints of account %s", id)
	}
	ds, err := store.ListAlertDeliveries(r.Context(), id, 100)
	if err != nil {
		return ledgerError(err, "listing the alert deliveries of account %s", id)
	}
	out := struct {
		Endpoints  []alertEndpointView `json:"endpoints"`
		Deliveries []alertDeliveryView `json:"deliveries"`
	}{Endpoints: []alertEndpointView{}, Deliveries: []alertDeliveryView{}}
	for _, e := range eps {
		out.Endpoints = append(out.Endpoints, newAlertEndpointView(e))
	}
	for _, d := range ds {
		v := alertDeliveryView{ID: d.ID, EndpointID: d.EndpointID, EventID: d.EventID, Type: d.Kind, Created: d.Created, State: d.State,
			Attempts: d.Attempts, LastStatus: d.LastStatus, LastError: d.LastError, Finished: d.Finished}
		if d.State == ledger.AlertPending {
			v.NextAttempt = d.NextAttempt
		}
		out.Deliveries = append(out.Deliveries, v)
	}
	return writeAdminJSON(w, http.StatusOK, out)
}

func (adminAPI) createAlertEndpoint(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req alertEndpointRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	id := r.PathValue("id")
	if strings.TrimSpace(req.URL) == "" {
		return badRequest("url is required: the https:// address that receives the events")
	}
	for _, k := range req.Kinds {
		if !slices.Contains(ledger.AlertKinds, k) {
			return badRequest("kinds: %q is not an event type; the types are %s", k, strings.Join(ledger.AlertKinds, ", "))
		}
	}
	ae := textgenapp.AlertEndpointsFor(store)
	if ae == nil {
		return caddy.APIError{HTTPStatus: http.StatusConflict,
			Err: errors.New("no textgen_account with alerts on serves this ledger: alert endpoints need My Account (add textgen_account to the site, without alerts off)")}
	}
	var e ledger.AlertEndpoint
	var secret string
	err := audited(r.Context(), store, "alert.create", id, "alert endpoint "+req.URL, "", func() (err error) {
		e, secret, err = ae.AddAlertEndpoint(r.Context(), id, req.URL, req.Kinds)
		return err
	})
	switch {
	case errors.Is(err, ledger.ErrTooManyAlertEndpoints):
		return caddy.APIError{HTTPStatus: http.StatusConflict, Err: fmt.Errorf("account %s has %d alert endpoints, the most allowed; delete one first", id, ledger.MaxAlertEndpoints)}
	case errors.Is(err, ledger.ErrInvalidArgument):
		return badRequest("url: %v", err)
	case err != nil:
		return accountError(err, id, "adding an alert endpoint to account %s", id)
	}
	return writeAdminJSON(w, http.StatusCreated, struct {
		alertEndpointView
		Secret string `json:"secret"`
	}{newAlertEndpointView(e), secret})
}

func (adminAPI) deleteAlertEndpoint(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	if err := decodeAdminJSON(r, &struct{}{}, true); err != nil {
		return err
	}
	id, eid := r.PathValue("id"), r.PathValue("eid")
	err := audited(r.Context(), store, "alert.delete", id, "alert endpoint "+eid, "", func() error {
		return store.DeleteAlertEndpoint(r.Context(), id, eid)
	})
	if errors.Is(err, ledger.ErrNotFound) {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("account %s has no alert endpoint %s", id, eid)}
	}
	if err != nil {
		return ledgerError(err, "deleting alert endpoint %s of account %s", eid, id)
	}
	return writeAdminJSON(w, http.StatusOK, map[string]any{"deleted": eid})
}
