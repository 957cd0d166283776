// Package freeport picks free loopback ports for tests, so that every server a test starts
// listens on a port nobody else holds and two test runs on one machine never meet.
package freeport

import (
	"fmt"
	"net"
)

// Pick returns n distinct TCP ports that were free on 127.0.0.1 a moment ago. A server that
// then fails to bind one (another program took it in between) fails loudly, never silently
// sharing it.
func Pick(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("picking a free port: %w", err)
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
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
