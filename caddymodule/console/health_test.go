package console

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
	"github.com/caddy-textgen/textgen/caddymodule/internal/redistest"
	"github.com/caddy-textgen/textgen/ledger"
)

// TestConsoleOverviewHealth, on Badger and PostgreSQL: the Overview's health lines. Redis, the
// console's limits_store, is ok while a real redis-server answers and down once it is stopped
// (not used without a limits_store); the outbox line counts the queued messages and those
// with a last error (which makes it degraded) and shows no message's content or error; no
// model server is open in this process, so that line says not used.
func TestConsoleOverviewHealth(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			store := eng.open(t)
			rs := redistest.New(t)
			limits, err := ratelimit.OpenShared(rs.URL(0), ratelimit.SharedOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = limits.Close() })
			e := newEnvLimits(t, store, limits)
			plain := newEnv(t, store)

			acct, err := e.store.CreateAccount(bg, "customer@example.com")
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range []string{"verify", "reset"} {
				if _, err := e.store.EnqueueMail(bg, ledger.MailMessage{AccountID: acct.ID, Kind: kind, Sealed: []byte("sealed secret link")}); err != nil {
					t.Fatal(err)
				}
			}

			en := e.enroll("vera@example.com", ledger.OperatorViewer)
			logIn := func(env *env, code string) *client { // a recovery code is used once
				c := env.client()
				expectStatus(t, "the viewer logs in", c.login("vera@example.com", en.Password, code), http.StatusSeeOther)
				return c
			}
			viewer := logIn(e, en.RecoveryCodes[0])
			r := viewer.get("/console/")
			expectStatus(t, "the overview", r, http.StatusOK)
			mustContain(t, "the overview's health", r.body,
				`<p id="health-ledger" class="ok">Ledger: <strong>ok</strong>`,
				`<p id="health-models" class="small">Model servers: <strong>not used</strong>`,
				`<p id="health-redis" class="ok">Redis (log-in throttles): <strong>ok</strong>`,
				`<p id="health-mail" class="ok">Mail: <strong>ok</strong>, 2 queued, the oldest for `, `, 0 with a last error</p>`)

			// A sender fails to deliver one.
			ms, err := e.store.ClaimMail(bg, time.Minute, 1)
			if err != nil || len(ms) != 1 {
				t.Fatalf("claiming a message: %v %v", ms, err)
			}
			if err := e.store.RetryMail(bg, ms[0].ID, ms[0].Claim, time.Now().Add(time.Minute), "550 mailbox unavailable"); err != nil {
				t.Fatal(err)
			}
			if err := rs.Stop(); err != nil {
				t.Fatal(err)
			}
			r = viewer.get("/console/")
			expectStatus(t, "the overview with Redis stopped", r, http.StatusOK)
			mustContain(t, "the overview's health with Redis stopped", r.body,
				`<p id="health-redis" class="error">Redis (log-in throttles): <strong>down</strong>`,
				`<p id="health-mail" class="warn">Mail: <strong>degraded</strong>, 2 queued, the oldest for `, `, 1 with a last error</p>`)
			for _, secret := range []string{"sealed secret link", "550 mailbox", rs.Addr()} {
				if strings.Contains(r.body, secret) {
					t.Fatalf("the overview shows %q", secret)
				}
			}

			r = logIn(plain, en.RecoveryCodes[1]).get("/console/")
			expectStatus(t, "the overview without a limits_store", r, http.StatusOK)
			mustContain(t, "the overview without a limits_store", r.body,
				`<p id="health-redis" class="small">Redis (log-in throttles): <strong>not used</strong>`)
		})
	}
}

// TestConsoleOverviewModelHosts: the model servers' line is ok, degraded, down or not used as
// the hosts' health says, and names each host by its scheme and address only: never the
// password, path or query of its URL.
func TestConsoleOverviewModelHosts(t *testing.T) {
	up := backends.HostStatus{URL: "http://user:s3cret@gpu1.internal:11434/v1?key=k3y", Healthy: true}
	down := backends.HostStatus{URL: "https://gpu2.internal", LastError: "connection refused"}
	for _, c := range []struct {
		hosts        []backends.HostStatus
		word, detail string
	}{
		{nil, "not used", "no model server is open in this process"},
		{[]backends.HostStatus{up}, "ok", "1 of 1 hosts healthy"},
		{[]backends.HostStatus{up, down}, "degraded", "1 of 2 hosts healthy"},
		{[]backends.HostStatus{down}, "down", "0 of 1 hosts healthy"},
	} {
		l := hostsHealth(c.hosts)
		if string(l.Word) != c.word || l.Detail != c.detail || len(l.Hosts) != len(c.hosts) {
			t.Fatalf("%d hosts: %+v, want %s, %s", len(c.hosts), l, c.word, c.detail)
		}
	}
	l := hostsHealth([]backends.HostStatus{up, down})
	if got := fmt.Sprint(l.Hosts); got != "[{http://gpu1.internal:11434 true} {https://gpu2.internal false}]" {
		t.Fatalf("the hosts: %s", got)
	}
}
