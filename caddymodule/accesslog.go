package caddymodule

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Caddy's access log (a `log` in a site) encodes a copy of the request headers that Caddy takes
// before any handler runs, so no handler can redact X-Api-Key there; Caddy itself redacts
// Authorization (unless log_credentials). The operator must filter X-Api-Key out of that log, or
// have clients send Authorization: Bearer. So, once per server and process:
//
//   - at start (warnAccessLogsAtStart), a server that routes to a textgen handler and writes the
//     access log of the hosts that reach it to a log whose encoder writes X-Api-Key (tried on a
//     probe entry) is warned about, before the first key arrives;
//   - where the logs cannot be read at start, the first key sent in X-API-Key on a server that
//     writes an access log is warned about (warnKeyInAccessLog).

// warnedServers are the servers warned about (their *caddyhttp.Server, for the process's life).
var warnedServers sync.Map

// warnKeyInAccessLog warns once per server when r carries its key in X-API-Key on a server that
// writes an access log without log_credentials (with it, the operator chose to log keys).
func (h *Handler) warnKeyInAccessLog(r *http.Request) {
	if r.Header.Get("X-API-Key") == "" {
		return
	}
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if srv == nil || srv.Logs == nil || srv.Logs.ShouldLogCredentials {
		return
	}
	if _, warned := warnedServers.LoadOrStore(srv, true); warned {
		return
	}
	h.logger.Warn(accessLogWarning, zap.Strings("listen", srv.Listen))
}

// accessLogWarning is what both warnings say, and the fix.
const accessLogWarning = "this site writes an access log, which records request headers as they arrived: an API key sent in " +
	"X-API-Key is written there in clear unless the log's format filter deletes request>headers>X-Api-Key " +
	"(log { format filter { wrap json; request>headers>X-Api-Key delete } }, as the production example Caddyfile has; " +
	"docs/OPERATING.md, Logs); a key sent as Authorization: Bearer is redacted by Caddy"

// apiKeyLogField is the access log's field of the X-API-Key header, as Caddy's filter encoder
// names it: the header's canonical form, matched exactly.
const apiKeyLogField = "request>headers>X-Api-Key"

// warnAccessLogsAtStart warns about every server of ctx's config that routes to h and writes
// the access log of the hosts that reach h to a log that would record X-Api-Key (see above),
// once per server.
func (h *Handler) warnAccessLogsAtStart(ctx caddy.Context) {
	logs, ok := configLogs(ctx)
	if !ok {
		return // the first key in X-API-Key is warned about instead
	}
	appIface, err := ctx.App("http")
	if err != nil {
		return
	}
	app, _ := appIface.(*caddyhttp.App)
	if app == nil {
		return
	}
	for name, srv := range app.Servers {
		if srv.Logs == nil || srv.Logs.ShouldLogCredentials {
			continue
		}
		hosts, reached := hostsTo(srv.Routes, h, nil)
		if !reached {
			continue
		}
		leaking, known := leakingAccessLogs(srv.Logs, hosts, logs)
		if !known {
			continue // an encoder that cannot be read: the first key in X-API-Key is warned about
		}
		// Checked here, the server is not warned about again when a key arrives: a filtered log
		// needs no warning at all.
		if _, seen := warnedServers.LoadOrStore(srv, true); seen || len(leaking) == 0 {
			continue
		}
		h.logger.Warn(accessLogWarning, zap.String("server", name), zap.Strings("listen", srv.Listen), zap.Strings("logs", leaking))
	}
}

// hostsTo reports whether routes, or a subroute of them (a Caddyfile site, handle, route),
// reach h, and the hosts of the requests that can: those of the host matchers on the way
// (within, the innermost), nil where a route that reaches h matches any host. outer are the
// hosts of the route that holds routes.
func hostsTo(routes caddyhttp.RouteList, h *Handler, outer []string) ([]string, bool) {
	var hosts []string
	reached, anyHost := false, false
	for _, r := range routes {
		rh := routeHosts(r)
		if rh == nil {
			rh = outer
		}
		for _, mh := range r.Handlers {
			var sub []string
			var ok bool
			switch v := mh.(type) {
			case *Handler:
				sub, ok = rh, v == h
			case *caddyhttp.Subroute:
				sub, ok = hostsTo(v.Routes, h, rh)
			}
			if !ok {
				continue
			}
			reached = true
			if sub == nil {
				anyHost = true
			}
			hosts = append(hosts, sub...)
		}
	}
	if anyHost {
		return nil, reached
	}
	return hosts, reached
}

// routeHosts returns the hosts r is limited to: those of its host matchers where every
// matcher set of r has one, else nil (any host).
func routeHosts(r caddyhttp.Route) []string {
	var hosts []string
	for _, set := range r.MatcherSets {
		var found bool
		for _, m := range set {
			switch hm := m.(type) {
			case caddyhttp.MatchHost:
				hosts, found = append(hosts, hm...), true
			case *caddyhttp.MatchHost:
				hosts, found = append(hosts, *hm...), true
			}
		}
		if !found {
			return nil
		}
	}
	return hosts
}

// accessLoggerNames returns the names (under http.log.access) of the loggers that write the
// access log entries of requests to hosts (nil: any host), by Caddy's rules for a server's
// logs: a host mapped in logger_names logs to its names; any other host, unless
// skip_unmapped_hosts or skip_hosts, to default_logger_name ("" is http.log.access itself).
func accessLoggerNames(sl *caddyhttp.ServerLogConfig, hosts []string) map[string]bool {
	names := map[string]bool{}
	if hosts == nil {
		for _, ns := range sl.LoggerNames {
			for _, n := range ns {
				names[n] = true
			}
		}
		if !sl.SkipUnmappedHosts {
			names[sl.DefaultLoggerName] = true
		}
		return names
	}
	for _, host := range hosts {
		host = strings.ToLower(host)
		if ns, ok := mappedLoggerNames(sl, host); ok {
			for _, n := range ns {
				names[n] = true
			}
			continue
		}
		if sl.SkipUnmappedHosts || slices.ContainsFunc(sl.SkipHosts, func(s string) bool { return hostMatches(host, s) }) {
			continue
		}
		names[sl.DefaultLoggerName] = true
	}
	return names
}

// mappedLoggerNames returns the logger_names entry of host, exact or by a wildcard key.
func mappedLoggerNames(sl *caddyhttp.ServerLogConfig, host string) ([]string, bool) {
	for key, ns := range sl.LoggerNames {
		if hostMatches(host, strings.ToLower(key)) {
			return ns, true
		}
	}
	return nil, false
}

// hostMatches reports whether host is pattern, or matches it label by label where the
// pattern's label is "*" (a host matcher's wildcard matches a key written the same way).
func hostMatches(host, pattern string) bool {
	if host == pattern {
		return true
	}
	hl, pl := strings.Split(host, "."), strings.Split(pattern, ".")
	if len(hl) != len(pl) {
		return false
	}
	for i := range hl {
		if pl[i] != "*" && pl[i] != hl[i] {
			return false
		}
	}
	return true
}

// leakingAccessLogs returns the names of the logs (sorted) that write the access log entries
// of requests to hosts (see accessLoggerNames) with an encoder that keeps X-Api-Key; known is
// false where an encoder could not be read.
func leakingAccessLogs(sl *caddyhttp.ServerLogConfig, hosts []string, logs map[string]*caddy.CustomLog) (leaking []string, known bool) {
	for n := range accessLoggerNames(sl, hosts) {
		logger := "http.log.access"
		if n != "" {
			logger += "." + n
		}
		for logName, cl := range logs {
			if cl == nil || !logAccepts(cl, logger) || slices.Contains(leaking, logName) {
				continue
			}
			keeps, ok := keepsAPIKey(cl)
			if !ok {
				return nil, false
			}
			if keeps {
				leaking = append(leaking, logName)
			}
		}
	}
	slices.Sort(leaking)
	return leaking, true
}

// logAccepts reports whether cl writes the entries of the logger named name: Caddy's rule for
// a custom log's include and exclude lists (the longest matching namespace wins).
func logAccepts(cl *caddy.CustomLog, name string) bool {
	if len(cl.Include) == 0 && len(cl.Exclude) == 0 {
		return true
	}
	name += "."
	var accept, reject int
	for _, ns := range cl.Include {
		if strings.HasPrefix(name, ns+".") && len(ns) > accept {
			accept = len(ns)
		}
	}
	if len(cl.Include) > 0 && accept == 0 {
		return false
	}
	for _, ns := range cl.Exclude {
		if ns == "*" {
			return false
		}
		if strings.HasPrefix(name, ns+".") && len(ns) > reject {
			reject = len(ns)
		}
	}
	return accept > reject || (len(cl.Include) == 0 && reject == 0)
}

// apiKeyProbe stands for a key in the probe request of keepsAPIKey.
const apiKeyProbe = "textgen-access-log-probe-0123456789"

// keepsAPIKey reports whether cl's encoder writes X-Api-Key: it encodes, in memory, an access
// log entry of a request that carries apiKeyProbe in X-API-Key, as Caddy's server logs it, and
// looks for the probe in the result. So any encoder or filter counts as it behaves (delete,
// replace, hash, a regexp, another format), and nothing is written to the log. ok is false
// where the encoder cannot be read.
func keepsAPIKey(cl *caddy.CustomLog) (keeps, ok bool) {
	enc := customLogEncoder(cl)
	if enc == nil {
		return false, false
	}
	req := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Proto: "HTTP/1.1", Host: "probe",
		RemoteAddr: "127.0.0.1:1", Header: http.Header{"X-Api-Key": {apiKeyProbe}}}
	buf, err := enc.Clone().EncodeEntry(zapcore.Entry{Level: zapcore.InfoLevel, Message: "handled request"},
		[]zapcore.Field{zap.Object("request", caddyhttp.LoggableHTTPRequest{Request: req})})
	if err != nil {
		return false, false
	}
	defer buf.Free()
	return strings.Contains(buf.String(), apiKeyProbe), true
}
