package operator

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
	"github.com/caddy-textgen/textgen/ledger/pgledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestAdminRollOfMemberKey: the admin API (and the CLI, which calls it) rolls the keys of an
// account's own login, but not a key an organisation's member made: its new secret would go to
// whoever asked the operator, and a key's secret is shown only to its member. The refusal is a
// JSON error that carries no secret and leaves the key as it was; the operator may still change
// the member key's limits and revoke it. On both ledger engines.
func TestAdminRollOfMemberKey(t *testing.T) {
	for _, engine := range []struct {
		name string
		open func(t *testing.T) string
	}{
		{"badger", adminLedger},
		{"postgres", func(t *testing.T) string {
			ref, err := textgenapp.AcquireLedger(pgtest.NewDatabase(t), badgerledger.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := ref.Release(); err != nil {
					t.Error(err)
				}
			})
			return ref.Key()
		}},
	} {
		t.Run(engine.name, func(t *testing.T) { adminRollOfMemberKey(t, engine.open(t)) })
	}
}

func adminRollOfMemberKey(t *testing.T, dir string) {
	ctx := context.Background()
	secretRe := regexp.MustCompile(`tg_(live|test)_[0-9A-Za-z]{36}`)
	_, acct := adminDo(t, dir, "POST", "/textgen/accounts", `{"email":"org@example.com"}`)
	org := acct["id"].(string)
	store := textgenapp.OpenLedgers()[dir]
	if store == nil {
		t.Fatalf("no ledger open at %s", dir)
	}
	if _, err := store.MakeOrganisation(ctx, org); err != nil {
		t.Fatal(err)
	}
	m, err := store.CreateAccount(ctx, "colleague@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.AddMember(ctx, org, m.ID, ledger.RoleAdmin, false); err != nil {
		t.Fatal(err)
	}
	full, mk, err := store.CreateMemberKey(ctx, org, m.ID, ledger.Live, "colleague's", time.Time{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	base := "/textgen/accounts/" + org + "/keys/"

	w, _ := adminDo(t, dir, "POST", base+mk.ID+"/roll", `{"grace":"1h"}`)
	wantStatus(t, w, http.StatusForbidden, "only they can roll it")
	if secretRe.MatchString(w.Body.String()) {
		t.Fatalf("the refusal carries a secret: %s", w.Body)
	}
	if got, _, err := store.LookupKey(ctx, full); err != nil || got.ID != mk.ID || !got.Rolled.IsZero() || got.Last4 != mk.Last4 {
		t.Fatalf("the member's key after a refused roll: %+v %v", got, err)
	}

	// What the operator may do to it: limits, then revoking it.
	w, k := adminDo(t, dir, "POST", base+mk.ID+"/limits", `{"budget_month":5}`)
	wantStatus(t, w, http.StatusOK, "")
	if k["budget_month"] != 5.0 || secretRe.MatchString(w.Body.String()) {
		t.Fatalf("limits of the member's key: %s", w.Body)
	}

	// The organisation's own login's key rolls, its new secret in the answer.
	_, created := adminDo(t, dir, "POST", base[:len(base)-1], `{"name":"the company's"}`)
	w, rolled := adminDo(t, dir, "POST", base+created["id"].(string)+"/roll", `{}`)
	wantStatus(t, w, http.StatusOK, "")
	if nw, _ := rolled["key"].(string); !secretRe.MatchString(nw) || nw == created["key"] {
		t.Fatalf("roll of the organisation's own key: %s", w.Body)
	}

	w, _ = adminDo(t, dir, "POST", base+mk.ID+"/revoke", `{}`)
	wantStatus(t, w, http.StatusOK, "")
	if _, _, err := store.LookupKey(ctx, full); err == nil {
		t.Fatal("the member's key works after the operator revoked it")
	}
}

// TestCLIRollOfMemberKey: `caddy textgen key roll` of a key an organisation's member made fails
// with the admin API's reason, prints no secret and leaves the key working; the organisation's
// own key rolls. PostgreSQL, so that the test can make the member's key (as My Account does)
// while the server holds the ledger.
func TestCLIRollOfMemberKey(t *testing.T) {
	ctx := context.Background()
	secretRe := regexp.MustCompile(`tg_(live|test)_[0-9A-Za-z]{36}`)
	url := pgtest.NewDatabase(t)
	s := caddyproc.Start(t, fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama http://127.0.0.1:1\n\t}", url), url)
	org := caddyproc.Str(t, s.JSON("account", "create", "--email", "org@example.com"), "id")
	bob := caddyproc.Str(t, s.JSON("account", "create", "--email", "bob@example.com"), "id")
	s.JSON("member", "organise", "--account", org)
	s.JSON("member", "add", "--account", org, "--member", bob)
	store, err := pgledger.OpenPostgres(ctx, url, pgledger.PostgresOptions{SweepInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	full, k, err := store.CreateMemberKey(ctx, org, bob, ledger.Live, "bob's", time.Time{}, 10)
	if err != nil {
		t.Fatal(err)
	}

	res := s.Textgen("key", "roll", "--account", org, "--key-id", k.ID, "--grace", "1h")
	oneErrorLine(t, res, 1, "only they can roll it")
	if secretRe.MatchString(res.Stdout + res.Stderr) {
		t.Fatalf("a refused roll printed a secret: %s", res)
	}
	if got, _, err := store.LookupKey(ctx, full); err != nil || !got.Rolled.IsZero() {
		t.Fatalf("the member's key after a refused roll: %+v %v", got, err)
	}

	own := s.JSON("key", "create", "--account", org, "--name", "ci")
	rolled := s.JSON("key", "roll", "--account", org, "--key-id", caddyproc.Str(t, own, "id"))
	if nw := caddyproc.Str(t, rolled, "key"); !secretRe.MatchString(nw) || nw == caddyproc.Str(t, own, "key") {
		t.Fatalf("the roll of the organisation's own key: %v", rolled)
	}
}
