// Package binarytest tests the built caddy binary with the plugin as processes
// (caddymodule/internal/caddyproc): several instances on one PostgreSQL ledger, shared limits in
// Redis, kill -9 mid-stream, the database down under load, a full ledger lock, the OpenAI SDK
// against a process, a reload while running. Its tests mostly wait on those processes; they are a
// package of their own, beside caddymodule's tests of the in-process Caddy, so that go test runs
// the two at once.
package binarytest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/apitest"
	"github.com/caddy-textgen/textgen/internal/tier"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// testRoot holds the ledger directories of the tests, removed when the test binary ends.
var testRoot string

func TestMain(m *testing.M) {
	var err error
	if testRoot, err = os.MkdirTemp("", "textgen-binarytest-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := pgtest.Run(m) // stops the PostgreSQL server, if a test started it
	if ollama.srv != nil {
		_ = ollama.srv.Stop()
	}
	_ = os.RemoveAll(testRoot)
	os.Exit(code)
}

// ledgerDir returns a fresh directory for a ledger.
func ledgerDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(testRoot, "ledger-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// ollama is the package's real Ollama with the tiny model, started by the first test that asks
// and stopped by TestMain.
var ollama struct {
	once sync.Once
	srv  *ollamatest.Server
	err  error
}

// modelServer is the model server of a test whose generations are not its subject: the real
// Ollama in the full tier, the in-process fault server (a fake Ollama) in the fast tier.
func modelServer(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		return ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 24, Delay: 2 * time.Millisecond,
			Window: ollamatest.TinyWindow}).URL
	}
	tier.Full(t, "the real Ollama")
	ollama.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		ollama.srv, ollama.err = ollamatest.Start(ctx, ollamatest.Options{NumPredict: 24, NumParallel: 1})
	})
	if ollama.err != nil {
		t.Fatalf("starting the real Ollama: %v", ollama.err)
	}
	return ollama.srv.URL
}

// The paths of the API that these tests ask for.
const (
	generationsPath     = "/api/v1/generations/"
	signedReceiptSuffix = "/receipt"
	receiptKeysPath     = "/.well-known/textgen-receipt-keys"
)

// testRetentionKey is the retention_key of these tests (32 bytes, base64).
var testRetentionKey = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

func genBody(tool, input, lang, tone string) string {
	m := map[string]string{"tool": tool, "input": input, "language": lang}
	if tone != "" {
		m["tone"] = tone
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// numbered is n pieces "<piece>0 ", "<piece>1 ", ... joined: the text of a fault server with
// Numbered set.
func numbered(piece string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d ", piece, i)
	}
	return b.String()
}

// waitFor polls cond until it holds; 30 seconds is the safety net, not a timing assertion.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// deadURL returns the URL of a loopback port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// raiseFileLimit raises this process's open-file limit to its hard limit (processes it starts
// inherit it) and returns the limit now in force.
func raiseFileLimit(b testing.TB) uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	// Above the hard limit where the process may (root, or CAP_SYS_RESOURCE), else up to it.
	want := syscall.Rlimit{Cur: max(l.Max, 1<<16), Max: max(l.Max, 1<<16)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
		return want.Cur
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	return l.Cur
}

// The API's answers, read as caddymodule's tests read them (internal/apitest).
var (
	parseMetrics = apitest.ParseMetrics
	readSSE      = apitest.ReadSSE
	keyHolding   = apitest.KeyHolding
	decodeErr    = apitest.DecodeErr
)
