package caddymodule

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// adaptFile adapts a Caddyfile of the repository with Caddy's own loader (the textgen
// directives registered by this package and account's), failing the test on an error or a
// warning.
func adaptFile(t *testing.T, path string) string {
	t.Helper()
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(body, map[string]any{"filename": filepath.Base(path)})
	if err != nil {
		t.Fatalf("adapting %s: %v", path, err)
	}
	if len(warnings) > 0 {
		t.Fatalf("adapting %s: warnings %v", path, warnings)
	}
	return string(out)
}

// listenAddrs is every listen address of an adapted config's HTTP servers.
func listenAddrs(t *testing.T, adapted string) []string {
	t.Helper()
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string `json:"listen"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal([]byte(adapted), &cfg); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, srv := range cfg.Apps.HTTP.Servers {
		out = append(out, srv.Listen...)
	}
	return out
}

// wantIn fails the test for each of wants the adapted config does not contain.
func wantIn(t *testing.T, what, adapted string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(adapted, w) {
			t.Errorf("%s: the adapted config has no %s", what, w)
		}
	}
}

// TestPackageCaddyfile: the Caddyfile the .deb and .rpm install as /etc/caddy/Caddyfile (and the
// container image uses) adapts; with none of its variables set, it serves only the loopback
// address (a fresh install exposes nothing), keeps the ledger under the service's
// StateDirectory, and filters the key out of the access log; with the variables of a production
// host, and with those the Dockerfile sets, it adapts to them.
func TestPackageCaddyfile(t *testing.T) {
	const path = "../deploy/packaging/Caddyfile"
	for _, v := range []string{"TEXTGEN_SITE", "TEXTGEN_BIND", "TEXTGEN_LEDGER", "OLLAMA_HOST", "TEXTGEN_MODEL", "TEXTGEN_PUBLIC_URL"} {
		t.Setenv(v, "") // registers the restore
		os.Unsetenv(v)
	}
	out := adaptFile(t, path)
	addrs := listenAddrs(t, out)
	if len(addrs) == 0 {
		t.Fatal("no listen address: the site listens on every interface")
	}
	for _, l := range addrs {
		if !strings.HasPrefix(l, "127.0.0.1:") {
			t.Errorf("a fresh install listens on %q, not only on the loopback address", l)
		}
	}
	wantIn(t, "fresh install", out, `"ledger":"/var/lib/caddy-textgen/ledger"`, `"handler":"textgen"`,
		`"handler":"textgen_account"`, `request\u003eheaders\u003eX-Api-Key":{"filter":"delete"}`, `request\u003eheaders\u003eAuthorization":{"filter":"delete"}`)

	t.Setenv("TEXTGEN_SITE", "api.example.com")
	t.Setenv("TEXTGEN_BIND", "0.0.0.0")
	t.Setenv("TEXTGEN_PUBLIC_URL", "https://api.example.com")
	out = adaptFile(t, path)
	wantIn(t, "production", out, `"host":["api.example.com"]`, `"public_url":"https://api.example.com"`)

	// The container image's environment (Dockerfile).
	t.Setenv("TEXTGEN_SITE", ":80")
	t.Setenv("TEXTGEN_LEDGER", "/data/textgen/ledger")
	out = adaptFile(t, path)
	wantIn(t, "container", out, `"ledger":"/data/textgen/ledger"`)
	if addrs := listenAddrs(t, out); len(addrs) != 1 || addrs[0] != "0.0.0.0:80" {
		t.Errorf("container listens on %v, want [0.0.0.0:80]", addrs)
	}
}

// TestComposeCaddyfiles: the Caddyfiles deploy/compose mounts adapt: each instance's, with the
// shared ledger and limits from the environment and the load balancer trusted for the client's
// address, and the load balancer's, with both instances behind the readiness check.
func TestComposeCaddyfiles(t *testing.T) {
	out := adaptFile(t, "../deploy/compose/Caddyfile")
	wantIn(t, "instance", out, `"ledger":"{env.TEXTGEN_DATABASE_URL}"`, `"limits_store":"{env.TEXTGEN_REDIS_URL}"`,
		`"retention_key":"{env.TEXTGEN_RETENTION_KEY}"`, `"mail_key":"{env.TEXTGEN_MAIL_KEY}"`,
		`"handler":"metrics"`, `"source":"static"`, `request\u003eheaders\u003eX-Api-Key":{"filter":"delete"}`)
	lb := adaptFile(t, "../deploy/compose/lb.Caddyfile")
	wantIn(t, "load balancer", lb, `"dial":"textgen1:8080"`, `"dial":"textgen2:8080"`, `"uri":"/api/v1/ready"`,
		`"flush_interval":-1`)
}
