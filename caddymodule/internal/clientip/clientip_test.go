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
