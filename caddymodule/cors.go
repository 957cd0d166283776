package caddymodule

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// CORS lets browser apps on other origins call the API (cors_origins; off by default). The key
// travels in a header, never in a cookie, so no credentials are allowed: a page can spend only a
// key it holds itself (docs/USING-THE-API.md, "Browser apps").

// The request headers a browser app may send, and the response headers it may read.
const (
	corsAllowHeaders  = "Authorization, Content-Type, X-API-Key, Idempotency-Key, Accept, Last-Event-ID, Range"
	corsExposeHeaders = "X-Credits-Used, X-Credits-Remaining, X-Request-Id, Retry-After, RateLimit, RateLimit-Policy, Idempotent-Replayed, X-Should-Retry, X-Generation-Id, X-Generation-State, Content-Range"
	corsMaxAge        = "600"
)

// cors adds the CORS headers for a request from an allowed origin and answers its preflight
// (204). It reports whether the request has been answered. A request from another origin gets
// no CORS headers: the browser keeps the answer from the page.
func (h *Handler) cors(w http.ResponseWriter, r *http.Request) (answered bool) {
	origin := r.Header.Get("Origin")
	if len(h.CORSOrigins) == 0 || origin == "" {
		return false
	}
	allowed := "*"
	if !slices.Contains(h.CORSOrigins, "*") {
		if !slices.Contains(h.CORSOrigins, origin) {
			return false
		}
		allowed = origin
	}
	hdr := w.Header()
	hdr.Set("Access-Control-Allow-Origin", allowed)
	hdr.Add("Vary", "Origin")
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		hdr.Set("Access-Control-Allow-Methods", "GET, HEAD, POST")
		hdr.Set("Access-Control-Allow-Headers", corsAllowHeaders+sdkHeaders(r.Header.Get("Access-Control-Request-Headers")))
		hdr.Set("Access-Control-Max-Age", corsMaxAge)
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	hdr.Set("Access-Control-Expose-Headers", corsExposeHeaders)
	return false
}

// sdkHeaders is ", " and the headers of requested that the OpenAI SDKs send with every request
// (X-Stainless-*: the SDK's language, version and retry count; OpenAI-Organization and
// OpenAI-Project), which the door ignores; "" for none.
func sdkHeaders(requested string) string {
	var b strings.Builder
	for _, name := range strings.Split(requested, ",") {
		name = strings.TrimSpace(name)
		l := strings.ToLower(name)
		if strings.HasPrefix(l, "x-stainless-") || l == "openai-organization" || l == "openai-project" {
			b.WriteString(", ")
			b.WriteString(name)
		}
	}
	return b.String()
}

// validateCORSOrigins accepts "*" or origins as browsers send them: scheme://host[:port].
func validateCORSOrigins(origins []string) error {
	for _, o := range origins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" ||
			u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || strings.ToLower(o) != o {
			return fmt.Errorf("textgen: cors_origins: %q is not an origin such as https://app.example.com (scheme and host in lower case, no path)", o)
		}
	}
	return nil
}
