// Command tinyollama runs a real Ollama server with the tiny test model, for a developer's
// "dev mode" and for CI scripts:
//
//	go run ./backends/cmd/tinyollama            # prints OLLAMA_HOST=... MODEL=tiny
//	go run ./backends/cmd/tinyollama -install-only
//
// It prints one line, `OLLAMA_HOST=http://127.0.0.1:PORT MODEL=NAME`, on stdout once the model
// is loaded, writes the server's log to stderr, and stops the server on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

func main() {
	var (
		port        = flag.Int("port", 0, "loopback port to listen on (0: a free port)")
		model       = flag.String("model", ollamatest.DefaultModel, "name to register the tiny model under")
		numPredict  = flag.Int("num-predict", 16, "the model's default output length in tokens")
		dir         = flag.String("dir", "", "models folder to use and keep (default: a temporary one)")
		numParallel = flag.Int("num-parallel", 0, "OLLAMA_NUM_PARALLEL (0: Ollama's default)")
		maxQueue    = flag.Int("max-queue", 0, "OLLAMA_MAX_QUEUE (0: Ollama's default)")
		quiet       = flag.Bool("quiet", false, "do not copy the server log to stderr")
		installOnly = flag.Bool("install-only", false, "build and cache the pinned Ollama and the tiny model, print the binary's path, exit")
	)
	flag.Parse()

	if *installOnly {
		// What it does goes to stderr (a first build takes minutes); the path alone to stdout.
		bin, err := ollamatest.EnsureBinary()
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "tinyollama: Ollama %s: %s\n", ollamatest.OllamaVersion, bin)
		model, err := ollamatest.EnsureModelFile()
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "tinyollama: the tiny test model: %s\n", model)
		fmt.Println(bin)
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := ollamatest.Options{
		Port:        *port,
		Model:       *model,
		NumPredict:  *numPredict,
		Dir:         *dir,
		NumParallel: *numParallel,
		MaxQueue:    *maxQueue,
	}
	if !*quiet {
		opts.Log = os.Stderr
	}
	srv, err := ollamatest.Start(ctx, opts)
	if err != nil {
		fail(err)
	}
	fmt.Printf("OLLAMA_HOST=%s MODEL=%s\n", srv.URL, srv.Model)

	select {
	case <-ctx.Done():
	case <-srv.Exited():
		fmt.Fprintf(os.Stderr, "tinyollama: ollama serve exited unexpectedly; log tail:\n%s\n", srv.LogTail(4000))
		srv.Stop()
		os.Exit(1)
	}
	if err := srv.Stop(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "tinyollama:", err)
	os.Exit(1)
}
