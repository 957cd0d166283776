package webarea

import "net/http"

// SetPageHeaders sets the headers of every response of a web area. Its pages show an
// account's or the service's data and carry forms that move money: never cached, never
// sniffed, never framed, no referrer to other sites, and nothing loaded from elsewhere.
// scripts allows the area's own scripts; formsTo is where its forms may go (form-action).
func SetPageHeaders(h http.Header, scripts bool, formsTo string) {
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	script := ""
	if scripts {
		script = "script-src 'self'; "
	}
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; "+script+"img-src 'self'; "+
		"form-action "+formsTo+"; frame-ancestors 'none'; base-uri 'none'")
}
