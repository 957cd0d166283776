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
	ip, s := addr(r)
	if !ip.IsValid() {
		return s
	}
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.String()
		}
	}
	return ip.String()
}

// Addr is the client's address as Key determines it, whole (an IPv6 address is not cut to its
// /64), an IPv4-mapped address as the IPv4 address; ok is false when it cannot be parsed.
func Addr(r *http.Request) (netip.Addr, bool) {
	ip, _ := addr(r)
	return ip, ip.IsValid()
}

// addr is the client's address and the string it was parsed from.
func addr(r *http.Request) (netip.Addr, string) {
	s, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	if s == "" {
		s = r.RemoteAddr
		if host, _, err := net.SplitHostPort(s); err == nil {
			s = host
		}
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, s
	}
	return ip.Unmap(), s
}
