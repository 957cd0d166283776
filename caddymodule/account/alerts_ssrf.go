package account

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The guard against server-side request forgery: an alert endpoint is the customer's URL, which
// the server calls. Unless the operator allows private endpoints, an endpoint must be https://
// and resolve to public addresses only, checked when it is registered and again on every
// connection (net.Dialer's Control sees the address actually dialled, so a name that resolves
// to a public address at registration and to a private one later is refused then).

// blockedPrefixes are the ranges no alert may reach, besides what netip's predicates name
// (loopback, private, link-local, multicast, unspecified).
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),  // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, and the broadcast address
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64, which reaches any IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
	netip.MustParsePrefix("100::/64"),       // discard
	netip.MustParsePrefix("2002::/16"),      // 6to4, which embeds any IPv4 address
	netip.MustParsePrefix("2001::/32"),      // Teredo, likewise
}

// blockedAddr reports whether an alert may not be sent to ip: loopback, private (RFC 1918,
// fc00::/7), link-local (the cloud metadata address among them), carrier-grade NAT,
// unspecified, multicast, reserved, and the IPv4-mapped forms of those.
func blockedAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, p := range blockedPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// errPrivateEndpoint: an endpoint on an address the guard refuses.
var errPrivateEndpoint = errors.New("the address is private, loopback or reserved; alerts go to public addresses only")

// guardControl is net.Dialer's Control: it refuses a connection to a blocked address.
func guardControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("alert endpoint address %q: %w", address, err)
	}
	if blockedAddr(ap.Addr()) {
		return fmt.Errorf("%s: %w", ap.Addr(), errPrivateEndpoint)
	}
	return nil
}

// endpointProblem says, in a sentence for the customer, what is wrong with raw as an alert
// endpoint ("": nothing). Without allowPrivate its host must resolve, and to public addresses
// only.
func endpointProblem(ctx context.Context, raw string, allowPrivate bool) string {
	raw = strings.TrimSpace(raw)
	u, err := url.Parse(raw)
	if err != nil || len(raw) > ledger.MaxAlertURL {
		return "Enter a URL such as https://example.com/textgen-events."
	}
	if u.Scheme != "https" || u.Host == "" || u.Hostname() == "" {
		return "The URL must start with https:// and name a host: alerts are sent over HTTPS only."
	}
	if u.User != nil {
		return "The URL must not hold a user name or password."
	}
	if u.Fragment != "" {
		return "The URL must not have a #fragment."
	}
	if allowPrivate {
		return ""
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if blockedAddr(ip) {
			return "The URL points to a private, loopback or reserved address. Alerts go to public addresses only."
		}
		return ""
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(rctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return "The host " + host + " could not be found. Check the URL, or try again later."
	}
	for _, ip := range ips {
		if blockedAddr(ip) {
			return "The host " + host + " resolves to a private, loopback or reserved address. Alerts go to public addresses only."
		}
	}
	return ""
}
