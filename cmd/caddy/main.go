// Command caddy is Caddy with the caddy-textgen plugin: the main.go `xcaddy build --with
// github.com/caddy-textgen/textgen` writes, kept here so that `go build ./cmd/caddy` and the
// release build (.goreleaser.yaml) build exactly that.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	// plug in Caddy modules here
	_ "github.com/caddy-textgen/textgen"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

func main() {
	caddycmd.Main()
}
