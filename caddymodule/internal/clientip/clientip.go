// Package clientip gives the client address by which both handlers limit requests (failed
// authentications, log-ins, sign-ups), so that they count the same client the same way.
package clientip

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Key is the client's address as Caddy determined it (trusted_proxies and client_ip_headers
// apply), else the connection's. An IPv6 client is counted by its /64, the block one subscriber
// usually holds; an IPv4-mapped address is counted as the IPv4 address.
func Key(r *http.Request) string {
	s, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	if s == "" {
		s = r.RemoteAddr
		if host, _, err := net.SplitHostPort(s); err == nil {
			s = host
		}
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return s
	}
	ip = ip.Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.String()
		}
	}
	return ip.String()
}
