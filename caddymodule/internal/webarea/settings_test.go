package webarea

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// testArea is an area's settings as a handler keeps them.
type testArea struct {
	Ledger, LimitsStore, PathPrefix, CookieName, SiteName string
	SessionLifetime                                       caddy.Duration
	Colour                                                string   // a setting of its own
	Tags                                                  []string // one that may be repeated
}

func (h *testArea) settings() Settings {
	return Settings{Module: "test_area", Ledger: &h.Ledger, LimitsStore: &h.LimitsStore, PathPrefix: &h.PathPrefix,
		SessionLifetime: &h.SessionLifetime, CookieName: &h.CookieName, SiteName: &h.SiteName,
		Default: Defaults{PathPrefix: "/area", SessionLifetime: time.Hour, CookieName: "area", SiteName: "Area"}}
}

func (h *testArea) parse(src string) error {
	d := caddyfile.NewTestDispenser(src)
	return ParseBlock(d, h.settings(), []string{"tag"}, func(name string) (bool, error) {
		switch name {
		case "colour":
			if !d.NextArg() {
				return true, d.ArgErr()
			}
			h.Colour = d.Val()
			return true, nil
		case "tag":
			h.Tags = append(h.Tags, d.RemainingArgs()...)
			return true, nil
		}
		return false, nil
	})
}

// TestParseBlock: the settings every area has and the area's own are read; a repeated
// subdirective is refused unless the area allows it; unknown ones and arguments after the
// directive are refused.
func TestParseBlock(t *testing.T) {
	var h testArea
	err := h.parse(`test_area {
		ledger /var/lib/textgen
		limits_store redis://127.0.0.1:6379
		path_prefix /me/
		session_lifetime 2h
		cookie_name me
		site_name "Example API"
		colour blue
		tag a
		tag b
	}`)
	if err != nil {
		t.Fatal(err)
	}
	if h.Ledger != "/var/lib/textgen" || h.LimitsStore != "redis://127.0.0.1:6379" || h.PathPrefix != "/me/" ||
		h.SessionLifetime != caddy.Duration(2*time.Hour) || h.CookieName != "me" || h.SiteName != "Example API" ||
		h.Colour != "blue" || strings.Join(h.Tags, ",") != "a,b" {
		t.Fatalf("parsed %+v", h)
	}
	for src, want := range map[string]string{
		"test_area extra":                       "wrong argument count",
		"test_area {\nledger a\nledger b\n}":    "ledger specified more than once",
		"test_area {\ncolour a\ncolour b\n}":    "colour specified more than once",
		"test_area {\nshape round\n}":           `unknown subdirective "shape"`,
		"test_area {\nsession_lifetime soon\n}": "session_lifetime",
		"test_area {\nledger\n}":                "wrong argument count",
	} {
		var h testArea
		if err := h.parse(src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", src, err, want)
		}
	}
}

// TestSettings: the area's defaults fill what is not set (a trailing slash comes off the
// prefix); what cannot work is refused with the module and the setting named.
func TestSettings(t *testing.T) {
	h := testArea{Ledger: "/x", PathPrefix: "/me/"}
	h.settings().SetDefaults()
	if h.PathPrefix != "/me" || h.SessionLifetime != caddy.Duration(time.Hour) || h.CookieName != "area" || h.SiteName != "Area" {
		t.Fatalf("defaults: %+v", h)
	}
	if err := h.settings().Validate(); err != nil {
		t.Fatal(err)
	}
	for field, h := range map[string]testArea{
		"ledger":           {Ledger: " "},
		"path_prefix":      {Ledger: "/x", PathPrefix: "area"},
		"path_prefix /":    {Ledger: "/x", PathPrefix: "//"},
		"session_lifetime": {Ledger: "/x", SessionLifetime: caddy.Duration(365 * 24 * time.Hour)},
		"cookie_name":      {Ledger: "/x", CookieName: "a b"},
	} {
		err := h.settings().Validate()
		name := strings.Fields(field)[0]
		if err == nil || !strings.HasPrefix(err.Error(), "test_area: "+name) {
			t.Errorf("%s: %v, want an error naming test_area and %s", field, err, name)
		}
	}
}
