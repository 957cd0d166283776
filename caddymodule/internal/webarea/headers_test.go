package webarea

import (
	"net/http"
	"testing"
)

// TestSetPageHeaders: every page is uncached, unframed and unsniffed; scripts and form
// targets are what the area allows.
func TestSetPageHeaders(t *testing.T) {
	h := http.Header{}
	SetPageHeaders(h, false, "'self'")
	if h.Get("Cache-Control") != "no-store" || h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" ||
		h.Get("Referrer-Policy") != "same-origin" {
		t.Fatalf("headers: %v", h)
	}
	if csp := h.Get("Content-Security-Policy"); csp != "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'" {
		t.Fatalf("no scripts: %s", csp)
	}
	SetPageHeaders(h, true, "'self' https:")
	if csp := h.Get("Content-Security-Policy"); csp != "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self' https:; frame-ancestors 'none'; base-uri 'none'" {
		t.Fatalf("own scripts, forms to https: %s", csp)
	}
}
