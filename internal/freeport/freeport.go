// Package freeport picks free TCP ports for the servers tests start, so that every server
// listens on a port nobody else holds and two test runs on one machine never meet.
//
// A port the kernel hands out for "listen on port 0" comes from its ephemeral range, the same
// range it takes the local port of every outgoing connection from. A test that picks such a
// port, closes it and binds it again later (a server started as a process, a server stopped and
// started again on the same port, one port kept for a whole package) then finds it taken now
// and then by one of its own client connections: "bind: address already in use". So ports are
// picked at random outside the ephemeral range, where the kernel never puts a connection, and
// each is checked free on every interface before it is handed out.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// low is the lowest port handed out: well-known and registered services (PostgreSQL's 5432,
// Redis' 6379, mail's 1025 and 8025) live below it.
const low = 10000

// Pick returns n distinct TCP ports outside the kernel's ephemeral range that were free on
// every interface a moment ago. A server that then fails to bind one (another program took it
// in between) fails loudly, never silently sharing it.
func Pick(n int) ([]int, error) {
	first, last := ephemeralRange()
	var candidates []int
	if first > low {
		candidates = append(candidates, low, first-1)
	}
	if last < 65535 {
		candidates = append(candidates, max(last+1, low), 65535)
	}
	size := 0
	for i := 0; i < len(candidates); i += 2 {
		size += candidates[i+1] - candidates[i] + 1
	}
	ports := make([]int, 0, n)
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("picking a free port: none free in 1000 tries outside the ephemeral range %d-%d", first, last)
		}
		port := 0 // a machine whose ephemeral range leaves nothing: the kernel's pick
		if size > 0 {
			port = nth(candidates, rand.IntN(size))
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(port)) // every interface, as Caddy's http_port binds
		if err != nil {
			continue
		}
		port = l.Addr().(*net.TCPAddr).Port
		if slices.Contains(ports, port) {
			l.Close()
			continue
		}
		held = append(held, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// MustPick is Pick for TestMain: it panics when the machine has no free port.
func MustPick(n int) []int {
	p, err := Pick(n)
	if err != nil {
		panic(err)
	}
	return p
}

// nth is the i-th port of the ranges (pairs of first and last).
func nth(ranges []int, i int) int {
	for r := 0; r < len(ranges); r += 2 {
		if n := ranges[r+1] - ranges[r] + 1; i >= n {
			i -= n
			continue
		}
		return ranges[r] + i
	}
	panic("freeport: index beyond the ranges")
}

// ephemeralRange is the range the kernel takes outgoing connections' local ports from: Linux's
// setting, else IANA's dynamic range (which the BSDs and macOS use).
func ephemeralRange() (first, last int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, errA := strconv.Atoi(f[0])
			z, errZ := strconv.Atoi(f[1])
			if errA == nil && errZ == nil && a <= z {
				return a, z
			}
		}
	}
	return 49152, 65535
}
