package inflight

import (
	"net/http"
	"strings"
)

// Next is the handler after an area in Caddy's route: caddyhttp.Handler's shape, named here
// so that this package and its tests do not link Caddy.
type Next interface {
	ServeHTTP(http.ResponseWriter, *http.Request) error
}

// ServeArea serves a request for an area of pages mounted under prefix (My Account, the
// console): a path outside it goes on to next; inside it, the request runs under g with the
// area that current returns, or gets a 503 with Retry-After while the module is being replaced
// by a reload (g closed) or its app has not started yet (current returns nil: Caddy starts the
// HTTP app and the textgen app in no set order).
func (g *Guard) ServeArea(w http.ResponseWriter, r *http.Request, next Next, prefix string, current func() http.Handler) error {
	p := r.URL.Path
	if p != prefix && !strings.HasPrefix(p, prefix+"/") {
		return next.ServeHTTP(w, r)
	}
	if !g.Enter() {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "The server is reloading its configuration; retry.", http.StatusServiceUnavailable)
		return nil
	}
	defer g.Exit()
	area := current()
	if area == nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "The server is starting; retry.", http.StatusServiceUnavailable)
		return nil
	}
	area.ServeHTTP(w, r)
	return nil
}
