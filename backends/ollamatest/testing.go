package ollamatest

import (
	"context"
	"testing"
)

// StartT is Start for a test: it fails the test if the server cannot start, prints the server
// log's tail if the test failed, and stops the server when the test ends.
func StartT(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := Start(context.Background(), opts)
	if err != nil {
		tb.Fatalf("starting a real ollama: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("ollama server log tail (%s):\n%s", s.URL, s.LogTail(4000))
		}
		if err := s.Stop(); err != nil {
			tb.Logf("stopping ollama: %v", err)
		}
	})
	return s
}

// NewFaultServerT is NewFaultServer for a test: the server is closed when the test ends.
func NewFaultServerT(tb testing.TB, cfg FaultConfig) *FaultServer {
	tb.Helper()
	f := NewFaultServer(cfg)
	tb.Cleanup(f.Close)
	return f
}
