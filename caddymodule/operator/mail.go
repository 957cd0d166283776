package operator

import (
	"net/http"
)

// The e-mail outbox: GET /textgen/mail and POST /textgen/mail/{id}/drop. My Account's sender
// retries a message that fails until it goes out or its link expires; these routes show the
// operator what waits and why, and let them give up on a message that never will go out (an
// address that does not exist).

func (adminAPI) listMail(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	limit, err := limitFromQuery(r, "mail")
	if err != nil {
		return err
	}
	ms, err := store.ListMail(r.Context(), limit)
	if err != nil {
		return ledgerError(err, "listing the e-mail outbox")
	}
	t := now()
	views := make([]mailView, 0, len(ms))
	for _, m := range ms {
		views = append(views, mailView{
			ID: m.ID, AccountID: m.AccountID, Kind: m.Kind, Created: m.Created,
			Attempts: m.Attempts, NextAttempt: m.NextAttempt, LastError: m.LastError,
			Sending: m.LeaseUntil.After(t),
		})
	}
	return writeAdminJSON(w, http.StatusOK, mailList{Messages: views})
}

func (adminAPI) dropMail(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	if err := decodeAdminJSON(r, &struct{}{}, true); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := audited(r.Context(), store, "drop", "", "e-mail "+id, "", func() error { return DropMail(r.Context(), store, id) }); err != nil {
		return err
	}
	return writeAdminJSON(w, http.StatusOK, droppedMail{Dropped: id})
}
