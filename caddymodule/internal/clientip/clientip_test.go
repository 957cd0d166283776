package clientip

import (
	"net/http"
	"testing"
)

func TestKey(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:5555":             "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:443": "2001:db8:1:2::/64",
		"[::ffff:192.0.2.9]:80":      "192.0.2.9",
		"not an address":             "not an address",
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		if got := Key(r); got != want {
			t.Errorf("%s: %s, want %s", remote, got, want)
		}
	}
}

// TestAddr: the whole address, for a key's allowed ranges (an IPv6 address is not cut to its
// /64, an IPv4-mapped one is its IPv4 address).
func TestAddr(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:5555":             "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2:3:4:5:6",
		"[::ffff:192.0.2.9]:80":      "192.0.2.9",
		"not an address":             "",
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		got, ok := Addr(r)
		if (want == "") == ok || (ok && got.String() != want) {
			t.Errorf("%s: %v %v, want %q", remote, got, ok, want)
		}
	}
}
