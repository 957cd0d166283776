package account

// signup_credits: a new account gets its live credits once its address is confirmed, once,
// whatever else confirms it again; its live key then generates. Through the real Caddy (in
// process) with the real Ollama and a real SMTP server (mailpit), on a Badger ledger on disk;
// and the once-only rule on both engines (Badger on disk and PostgreSQL).

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/mailtest"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

const testSignupCredits = 30

// verifyLinks waits until mailpit holds n verification messages to addr and returns their links.
func verifyLinks(t *testing.T, mp *mailtest.Server, addr string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ms, err := mp.To(context.Background(), addr, "Confirm your email address")
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) >= n {
			var links []string
			for _, m := range ms {
				l := linkRe.FindString(m.Text)
				if l == "" {
					t.Fatalf("no link in %q:\n%s", m.Subject, m.Text)
				}
				links = append(links, l)
			}
			return links
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d verification messages to %s, want %d", len(ms), addr, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// liveCredits is the account's live balance and available credits.
func liveCredits(t *testing.T, store ledger.Store, acct string) (balance, available int64) {
	t.Helper()
	b, err := store.Balance(bg, acct)
	if err != nil {
		t.Fatal(err)
	}
	return b.Balance, b.Available
}

func TestSignupCreditsThroughCaddy(t *testing.T) {
	fastMail(t)
	mp := mailtest.New(t)
	ollama := realOllama(t)
	dir, err := os.MkdirTemp(testRoot, "ledger-")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEXTGEN_TEST_MAIL_KEY", base64.StdEncoding.EncodeToString(testMailKey))
	loadCaddyfile(t, fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 5s
	skip_install_trust
}
http://127.0.0.1:%d {
	textgen /api/* {
		ledger %s
		ollama %s
		model %s
		max_output_tokens 16
	}
	textgen_account {
		ledger %s
		public_url %s
		signup_credits %d
		smtp {
			host %s
			port %d
			security none
			from "Textgen <no-reply@example.com>"
		}
		mail_key {env.TEXTGEN_TEST_MAIL_KEY}
	}
	respond "not found" 404
}
`, caddyAdminPort, caddyHTTPPort, caddyHTTPSPort, caddyHTTPPort, dir, ollama.URL, ollama.Model, dir, caddyBase,
		testSignupCredits, mp.Host(), mp.SMTPPort()))
	store, release := openLedger(t, dir)
	defer release()

	b := httpBrowser(t)
	email := uniqueEmail("signup-credits")
	r := b.post("/account/signup", "csrf_token", b.csrf("/account/signup"), "email", email, "password", testPassword)
	if r.status != http.StatusSeeOther {
		t.Fatalf("sign-up: %d\n%s", r.status, r.body)
	}
	acct, err := store.GetAccountByEmail(bg, email)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing before the address is confirmed: an address nobody reads gets nothing.
	if bal, _ := liveCredits(t, store, acct.ID); bal != 0 {
		t.Fatalf("live balance %d before the address is confirmed, want 0", bal)
	}
	// A second link, asked for on the settings page: two links, both valid.
	r = b.post("/account/verify/resend", "csrf_token", b.csrf("/account/settings"))
	if r.status != http.StatusSeeOther {
		t.Fatalf("asking for a new link: %d\n%s", r.status, r.body)
	}
	links := verifyLinks(t, mp, email, 2)

	r = b.get(links[0])
	expectStatus(t, "verification link", r, http.StatusOK)
	mustContain(t, "verified page", r.body, "is confirmed", fmt.Sprintf("%d free credits", testSignupCredits))
	if bal, _ := liveCredits(t, store, acct.ID); bal != testSignupCredits {
		t.Fatalf("live balance %d after the confirmation, want %d", bal, testSignupCredits)
	}
	// The other link confirms the address again: no second grant.
	expectStatus(t, "the second verification link", b.get(links[1]), http.StatusOK)
	if bal, _ := liveCredits(t, store, acct.ID); bal != testSignupCredits {
		t.Fatalf("live balance %d after a second confirmation, want %d (granted twice?)", bal, testSignupCredits)
	}

	// The live key made on the keys page generates on the sign-up credits, and its answer says so.
	r = b.post("/account/keys", "csrf_token", b.csrf("/account/keys"), "name", "first", "mode", "live")
	expectStatus(t, "live key", r, http.StatusCreated)
	key := fullKeyRe.FindString(r.body)
	if !strings.HasPrefix(key, "tg_live_") {
		t.Fatalf("no live key on the page:\n%s", r.body)
	}
	res := generate(t, key)
	if res.status != http.StatusOK || res.header.Get("X-Credits-Used") != "1" {
		t.Fatalf("generate with the new live key: %d %v\n%s", res.status, res.header, res.body)
	}
	if bal, _ := liveCredits(t, store, acct.ID); bal != testSignupCredits-1 {
		t.Fatalf("live balance %d after one generation, want %d", bal, testSignupCredits-1)
	}
	// The history names the grant.
	entries, _, err := store.History(bg, acct.ID, ledger.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	grants := 0
	for _, e := range entries {
		if e.Kind == ledger.KindGrant && e.Mode == ledger.Live {
			grants++
			if e.Reference != signupReference(acct.ID) || e.Amount != testSignupCredits {
				t.Fatalf("the sign-up grant: %+v", e)
			}
		}
	}
	if grants != 1 {
		t.Fatalf("%d live grants in the history, want 1: %+v", grants, entries)
	}
}

// TestSignupCreditsOnce: on both engines, confirmations of one account at once (two links
// followed together, twice each) grant once; without smtp the credits come at sign-up, once;
// without signup_credits nothing is granted.
func TestSignupCreditsOnce(t *testing.T) {
	for _, engine := range []struct {
		name string
		open func(t *testing.T) ledger.Store
	}{
		{"badger", func(t *testing.T) ledger.Store {
			s := diskLedger(t, t.TempDir())
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"postgres", func(t *testing.T) ledger.Store { return postgresOpener(t, pgtest.NewDatabase(t))() }},
	} {
		t.Run(engine.name, func(t *testing.T) {
			fastMail(t)
			mp := mailtest.New(t)
			store := engine.open(t)
			e := newTestEnvOn(t, store, withMail(t, mp), withSignupCredits(testSignupCredits))
			t.Cleanup(e.app.close)
			b := e.browser()
			email := uniqueEmail("signup-once-" + engine.name)
			acct := b.signup(email)
			r := b.post("/account/verify/resend", "csrf_token", b.csrf("/account/settings"))
			if r.status != http.StatusSeeOther {
				t.Fatalf("asking for a new link: %d\n%s", r.status, r.body)
			}
			links := verifyLinks(t, mp, email, 2)
			var wg sync.WaitGroup
			for _, l := range append(links, links...) {
				wg.Go(func() { e.browser().get(l) })
			}
			wg.Wait()
			if got, _ := store.GetAccount(bg, acct.ID); got.Unverified {
				t.Fatal("still unverified")
			}
			if bal, _ := liveCredits(t, store, acct.ID); bal != testSignupCredits {
				t.Fatalf("live balance %d after confirmations at once, want %d", bal, testSignupCredits)
			}

			// Without smtp a sign-up counts as confirmed: the credits come at once, once.
			noMail := newTestEnvOn(t, store, withSignupCredits(testSignupCredits))
			other := noMail.browser().signup(uniqueEmail("signup-nomail-" + engine.name))
			if other.Unverified {
				t.Fatal("a sign-up without smtp is unverified")
			}
			if bal, _ := liveCredits(t, store, other.ID); bal != testSignupCredits {
				t.Fatalf("live balance %d after a sign-up without smtp, want %d", bal, testSignupCredits)
			}
			if err := noMail.app.grantSignupCredits(bg, other.ID); err != nil {
				t.Fatal(err)
			}
			if bal, _ := liveCredits(t, store, other.ID); bal != testSignupCredits {
				t.Fatalf("live balance %d after the grant ran again, want %d", bal, testSignupCredits)
			}

			// The default: none.
			none := newTestEnvOn(t, store).browser().signup(uniqueEmail("signup-none-" + engine.name))
			if bal, _ := liveCredits(t, store, none.ID); bal != 0 {
				t.Fatalf("live balance %d without signup_credits, want 0", bal)
			}
		})
	}
}

// withSignupCredits turns signup_credits on.
func withSignupCredits(n int64) envOpt {
	return func(c *appConfig) { c.signupCredits = n }
}
