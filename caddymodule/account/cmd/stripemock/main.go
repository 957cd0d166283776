// Command stripemock runs the pinned stripe-mock (Stripe's own mock of its API) for a developer's
// local purchase in dev mode (./xcaddy.sh dev --stripe):
//
//	go run ./caddymodule/account/cmd/stripemock       # prints STRIPE_API_URL=http://127.0.0.1:PORT
//	go run ./caddymodule/account/cmd/stripemock -install-only
//
// It installs stripe-mock into the cache the tests use when it is missing (go install
// github.com/stripe/stripe-mock@v0.203.0 into <cache>/stripe-mock-v0.203.0, saying so on
// stderr), starts it on a free loopback port, prints one line, `STRIPE_API_URL=...`, on stdout
// once it answers, and stops it on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/account/stripemocktest"
)

func main() {
	installOnly := flag.Bool("install-only", false, "install stripe-mock into the cache if missing, print its path, exit")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *installOnly {
		bin, err := stripemocktest.EnsureBinary()
		if err != nil {
			fail(err)
		}
		fmt.Println(bin)
		return
	}
	startCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	srv, err := stripemocktest.Start(startCtx)
	cancel()
	if err != nil {
		fail(err)
	}
	fmt.Printf("STRIPE_API_URL=%s\n", srv.URL)
	<-ctx.Done()
	srv.Stop()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "stripemock:", err)
	os.Exit(1)
}
