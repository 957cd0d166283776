package account

import (
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestAlertsCaddyfile: `alerts off`, `alerts { allow_private_endpoints }`, and what is refused.
func TestAlertsCaddyfile(t *testing.T) {
	for src, want := range map[string]Alerts{
		"textgen_account {\n alerts off\n}":                             {Off: true},
		"textgen_account {\n alerts {\n allow_private_endpoints\n }\n}": {AllowPrivateEndpoints: true},
		"textgen_account {\n alerts {\n }\n}":                           {},
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(src)); err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if h.Alerts == nil || *h.Alerts != want {
			t.Fatalf("%s: parsed %+v; want %+v", src, h.Alerts, want)
		}
	}
	for _, bad := range []string{
		"textgen_account {\n alerts on\n}",
		"textgen_account {\n alerts off extra\n}",
		"textgen_account {\n alerts {\n allow_private_endpoints yes\n }\n}",
		"textgen_account {\n alerts {\n allow_everything\n }\n}",
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Fatalf("%s: accepted", bad)
		}
	}
}
