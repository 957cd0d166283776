package operator

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// TestAdminMail: GET /textgen/mail shows each queued message's state (attempts, last error, next
// attempt, whether a sender holds it now), oldest first, and never its sealed bytes or a
// sender's claim; POST .../drop removes one, once. The messages are queued, claimed and
// retried on a real Badger ledger as My Account's sender does (the end-to-end way, with a real
// SMTP server that is down, is TestCLIMail).
func TestAdminMail(t *testing.T) {
	bg := context.Background()
	dir := adminLedger(t)
	store := textgenapp.OpenLedgers()[dir]
	if store == nil {
		t.Fatalf("ledger %s is not open", dir)
	}
	const secret = "/account/invite?token=sealedsecretsealedsecret"
	var ids []string
	for _, kind := range []string{"invite", "verify", "reset"} {
		id, err := store.EnqueueMail(bg, ledger.MailMessage{AccountID: "acct_mailmailmailmail", Kind: kind, Sealed: []byte(secret)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		time.Sleep(time.Millisecond) // distinct creation times, so the order is theirs
	}
	// The first fails once and waits; the second is being sent; the third was never tried.
	claimed, err := store.ClaimMail(bg, time.Hour, 2)
	if err != nil || len(claimed) != 2 || claimed[0].ID != ids[0] {
		t.Fatalf("claim: %+v, %v", claimed, err)
	}
	next := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if err := store.RetryMail(bg, ids[0], claimed[0].Claim, next, "550 5.1.1 no such user"); err != nil {
		t.Fatal(err)
	}

	w, body := adminDo(t, dir, "GET", "/textgen/mail", "")
	wantStatus(t, w, http.StatusOK, "")
	for _, leak := range []string{secret, "sealed", claimed[1].Claim, "claim", "lease"} {
		if strings.Contains(w.Body.String(), leak) {
			t.Errorf("GET /textgen/mail shows %q: %s", leak, w.Body)
		}
	}
	ms, _ := body["messages"].([]any)
	if len(ms) != 3 {
		t.Fatalf("messages: %v", body)
	}
	view := func(i int) map[string]any { return ms[i].(map[string]any) }
	if m := view(0); m["id"] != ids[0] || m["kind"] != "invite" || m["account_id"] != "acct_mailmailmailmail" || m["attempts"] != 1.0 ||
		m["last_error"] != "550 5.1.1 no such user" || m["next_attempt"] != next.Format(time.RFC3339) || m["sending"] != false || m["created"] == nil {
		t.Errorf("the retried message: %v", m)
	}
	if m := view(1); m["id"] != ids[1] || m["attempts"] != 1.0 || m["sending"] != true || m["last_error"] != nil {
		t.Errorf("the message being sent: %v", m)
	}
	if m := view(2); m["id"] != ids[2] || m["attempts"] != 0.0 || m["sending"] != false {
		t.Errorf("the message never tried: %v", m)
	}
	if _, one := adminDo(t, dir, "GET", "/textgen/mail?limit=1", ""); len(one["messages"].([]any)) != 1 {
		t.Errorf("limit=1: %v", one)
	}

	// Dropping the one being sent: gone from the list, and the sender cannot mark it sent.
	w, dropped := adminDo(t, dir, "POST", "/textgen/mail/"+ids[1]+"/drop", "")
	wantStatus(t, w, http.StatusOK, "")
	if dropped["dropped"] != ids[1] {
		t.Fatalf("drop: %v", dropped)
	}
	w, _ = adminDo(t, dir, "POST", "/textgen/mail/"+ids[1]+"/drop", "")
	wantStatus(t, w, http.StatusNotFound, "not found")
	_, body = adminDo(t, dir, "GET", "/textgen/mail", "")
	if ms, _ := body["messages"].([]any); len(ms) != 2 || ms[0].(map[string]any)["id"] != ids[0] || ms[1].(map[string]any)["id"] != ids[2] {
		t.Fatalf("after the drop: %v", body)
	}
	if err := store.MarkMailSent(bg, ids[1], claimed[1].Claim); err == nil {
		t.Fatal("the sender marked a dropped message sent")
	}
}
