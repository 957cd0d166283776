package console

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestUnmarshalCaddyfile: every subdirective sets its field; unknown, repeated and malformed
// ones are refused with a message that names them; Validate names the field of a bad value.
func TestUnmarshalCaddyfile(t *testing.T) {
	var h Handler
	d := caddyfile.NewTestDispenser(`textgen_console {
		ledger /var/lib/textgen
		limits_store redis://127.0.0.1:6379
		path_prefix /ops
		session_lifetime 4h
		idle_timeout 10m
		cookie_name ops_session
		console_key {env.TEXTGEN_CONSOLE_KEY}
		support_grant_limit 250
		site_name "Text API"
	}`)
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	want := Handler{Ledger: "/var/lib/textgen", LimitsStore: "redis://127.0.0.1:6379", PathPrefix: "/ops",
		SessionLifetime: caddy.Duration(4 * time.Hour), IdleTimeout: caddy.Duration(10 * time.Minute), CookieName: "ops_session",
		ConsoleKey: "{env.TEXTGEN_CONSOLE_KEY}", SupportGrantLimit: 250, SiteName: "Text API"}
	if fmt.Sprintf("%+v", h) != fmt.Sprintf("%+v", want) {
		t.Fatalf("parsed %+v\nwant %+v", h, want)
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	for cfg, msg := range map[string]string{
		"textgen_console {\nbogus 1\n}":                                    "unknown subdirective",
		"textgen_console {\nledger a\nledger b\n}":                         "more than once",
		"textgen_console {\nsupport_grant_limit many\n}":                   "support_grant_limit",
		"textgen_console {\nidle_timeout soon\n}":                          "idle_timeout",
		"textgen_console extra {\nledger a\n}":                             "wrong argument count",
		"textgen_console {\nledger\n}":                                     "wrong argument count",
		"textgen_console {\nledger a\nsession_lifetime 1h 2h\n}":           "wrong argument count",
		"textgen_console {\nledger a\ncookie_name one\ncookie_name two\n}": "more than once",
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(cfg))
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error with %q", cfg, err, msg)
		}
	}
	for _, c := range []struct {
		h   Handler
		msg string
	}{
		{Handler{}, "ledger"},
		{Handler{Ledger: "l", PathPrefix: "ops"}, "path_prefix"},
		{Handler{Ledger: "l", PathPrefix: "/"}, "path_prefix"},
		{Handler{Ledger: "l", CookieName: "a b"}, "cookie_name"},
		{Handler{Ledger: "l", SupportGrantLimit: -1}, "support_grant_limit"},
		{Handler{Ledger: "l", IdleTimeout: -1}, "idle_timeout"},
		{Handler{Ledger: "l", SessionLifetime: caddy.Duration(365 * 24 * time.Hour)}, "session_lifetime"},
	} {
		if err := c.h.Validate(); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Validate %+v: %v, want an error naming %s", c.h, err, c.msg)
		}
	}
}
