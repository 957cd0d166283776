// Package webarea is what the plugin's two areas of web pages, My Account (textgen_account)
// and the operator's console (textgen_console), have in common: the settings both have, read
// from the Caddyfile, defaulted and checked the same way (settings.go, caddyfile.go); the
// running part, their shares of the ledger and the limits store, the pages built when the
// textgen app starts, kept until the last request (area.go); and what every page and form
// does: the security headers (headers.go), the bounded form behind the cross-origin check
// (form.go).
package webarea

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/ledger"
)

// Settings points at the settings every web area has. Each area's handler keeps them as JSON
// fields of its own, documented with its own defaults; Settings reads, defaults and checks
// them the same way for both.
type Settings struct {
	// Module is the area's directive, in messages ("textgen_account").
	Module string

	Ledger          *string
	LimitsStore     *string
	PathPrefix      *string
	SessionLifetime *caddy.Duration
	CookieName      *string
	SiteName        *string

	// Default holds the area's defaults.
	Default Defaults
}

// Defaults are a web area's defaults of the settings every area has.
type Defaults struct {
	PathPrefix      string // also the example in path_prefix's message
	SessionLifetime time.Duration
	CookieName      string
	SiteName        string
}

// SetDefaults fills the settings that are not set, and takes a trailing slash off PathPrefix.
func (s Settings) SetDefaults() {
	*s.PathPrefix = strings.TrimRight(cmp.Or(*s.PathPrefix, s.Default.PathPrefix), "/")
	*s.SessionLifetime = cmp.Or(*s.SessionLifetime, caddy.Duration(s.Default.SessionLifetime))
	*s.CookieName = cmp.Or(*s.CookieName, s.Default.CookieName)
	*s.SiteName = cmp.Or(*s.SiteName, s.Default.SiteName)
}

var cookieNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Validate rejects a setting that cannot work, naming it.
func (s Settings) Validate() error {
	if strings.TrimSpace(*s.Ledger) == "" {
		return fmt.Errorf("%s: ledger: the directory of the ledger (as in textgen) is required", s.Module)
	}
	if p := *s.PathPrefix; p != "" && (!strings.HasPrefix(p, "/") || strings.ContainsAny(p, " ?#{}*") || strings.Trim(p, "/") == "") {
		return fmt.Errorf("%s: path_prefix: %q must be a path like %s", s.Module, p, s.Default.PathPrefix)
	}
	if *s.SessionLifetime < 0 || time.Duration(*s.SessionLifetime) > ledger.MaxSessionTTL {
		return fmt.Errorf("%s: session_lifetime: must be between 0 and %s", s.Module, ledger.MaxSessionTTL)
	}
	if c := *s.CookieName; c != "" && !cookieNameRe.MatchString(c) {
		return fmt.Errorf("%s: cookie_name: %q may hold only letters, digits, - and _", s.Module, c)
	}
	return nil
}
