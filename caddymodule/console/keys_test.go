package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestConsoleKeySearch: the Accounts page finds an account by one of its keys as the customer
// sees it (the hint, its last 4 characters, the key id, a rolled key's new hint), says when
// nothing matches, and never shows a whole key pasted into it.
func TestConsoleKeySearch(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, eng.open(t))
			at := time.Date(2026, 5, 1, 9, 0, 10, 0, time.UTC)
			setClock(t, &at)
			acct, err := e.store.CreateAccount(bg, "keyed@example.com")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.CreateAccount(bg, "other@example.com"); err != nil {
				t.Fatal(err)
			}
			full, k, err := e.store.CreateKey(bg, acct.ID, ledger.Live, "ci", time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			en := e.enroll("vera@example.com", ledger.OperatorViewer)
			viewer := e.client()
			expectStatus(t, "the viewer logs in", viewer.login("vera@example.com", en.Password, en.RecoveryCodes[0]), http.StatusSeeOther)
			// find searches as the page's form does: a POST, then the address it answers with.
			find := func(q string) resp {
				t.Helper()
				r := viewer.post("/console/accounts", "csrf_token", viewer.csrf("/console/accounts"), "q", q)
				expectStatus(t, "the search form with "+q, r, http.StatusSeeOther)
				return viewer.get(strings.TrimPrefix(r.header.Get("Location"), viewer.base))
			}
			last4 := full[len(full)-4:]
			for _, q := range []string{"tg_live_…" + last4, "tg_live_..." + last4, last4, k.ID} {
				r := find(q)
				expectStatus(t, "a search by "+q, r, http.StatusSeeOther)
				if loc := r.header.Get("Location"); loc != "/console/accounts/"+acct.ID {
					t.Fatalf("a search by %s goes to %q", q, loc)
				}
			}
			newFull, _, err := e.store.RollKey(bg, acct.ID, k.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			r := find("tg_live_…" + newFull[len(newFull)-4:])
			expectStatus(t, "a search by the rolled key's hint", r, http.StatusSeeOther)
			r = find("key_AAAAAAAAAAAA")
			expectStatus(t, "a search by an unknown key id", r, http.StatusOK)
			mustContain(t, "a search by an unknown key id", r.body, "No key matches key_AAAAAAAAAAAA.")
			// A key's secret anywhere in the input is refused, never shown again and never sent on
			// to an address; so is a key mistyped, cut short or without its prefix.
			secret := newFull[len("tg_live_"):]
			mistyped := newFull[:30] + map[bool]string{true: "B", false: "A"}[newFull[30] == 'A'] + newFull[31:]
			for _, q := range []string{
				newFull, `"` + newFull + `"`, newFull + ".", "Bearer " + newFull, "X-API-Key: " + newFull,
				"x-api-key:" + newFull, "'" + newFull + "'", "keyed@example.com " + newFull, newFull + "@example.com",
				"acct_" + newFull, secret, mistyped, newFull[:24],
			} {
				r := viewer.post("/console/accounts", "csrf_token", viewer.csrf("/console/accounts"), "q", q)
				expectStatus(t, "a search by "+q, r, http.StatusBadRequest)
				mustContain(t, "a search by "+q, r.body, "a secret")
				if r.header.Get("Location") != "" || strings.Contains(r.body, secret[:20]) || strings.Contains(r.body, mistyped[8:28]) {
					t.Fatalf("a search by %q: the page shows the key it was given or sends it on (%q):\n%s", q, r.header.Get("Location"), r.body)
				}
				// An address that already holds one (typed, or an old link) moves to one that
				// does not, and searches nothing.
				r = viewer.get("/console/accounts?q=" + url.QueryEscape(q))
				expectStatus(t, "an address with "+q, r, http.StatusSeeOther)
				loc := r.header.Get("Location")
				if strings.Contains(loc, secret[:20]) || strings.Contains(loc, mistyped[8:28]) || strings.Contains(loc, "q=") {
					t.Fatalf("an address with %q goes to %q", q, loc)
				}
				r = viewer.get(loc)
				expectStatus(t, "the page an address with a key goes to", r, http.StatusOK)
				mustContain(t, "the page an address with a key goes to", r.body, "a secret")
			}
			if !strings.Contains(viewer.get("/console/accounts").body, `method="post"`) {
				t.Fatal("the search form is not sent by POST")
			}
			r = find("hello")
			mustContain(t, "a search by nothing like a key", r.body, "Search by an e-mail address")
		})
	}
}

// TestConsoleKeySearchList: keys of several accounts that end alike are listed with their
// accounts (the ledger cannot be made to hand out such keys on purpose, so the page is
// rendered from them).
func TestConsoleKeySearchList(t *testing.T) {
	a := newApp(appConfig{store: engines[0].open(t), logger: zap.NewNop(), prefix: "/console", siteName: "Test API"})
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	d := accountsData{Query: "abcd", Keys: []keyMatch{
		{Key: ledger.Key{ID: "key_AAAAAAAAAAAA", AccountID: "acct_AAAAAAAAAAAAAAAA", Prefix: "tg_live_", Last4: "abcd", Name: "ci", Created: at}, Email: "a@example.com"},
		{Key: ledger.Key{ID: "key_BBBBBBBBBBBB", AccountID: "acct_BBBBBBBBBBBBBBBB", Prefix: "tg_test_", Last4: "abcd", Created: at, Revoked: at}, Email: "b@example.com"},
	}}
	w := httptest.NewRecorder()
	a.render(w, httptest.NewRequest("GET", "/console/accounts?q=abcd", nil), http.StatusOK, "accounts", nil, page{Title: "Accounts", Data: d})
	mustContain(t, "the list of keys", w.Body.String(), "tg_live_…abcd (key_AAAAAAAAAAAA)", `href="/console/accounts/acct_AAAAAAAAAAAAAAAA">a@example.com`,
		"tg_test_…abcd (key_BBBBBBBBBBBB)", `href="/console/accounts/acct_BBBBBBBBBBBBBBBB">b@example.com`, "revoked", "active")
}
