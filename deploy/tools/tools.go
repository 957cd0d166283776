// Package tools pins the release tool of this repository in a module of its own, so that its
// dependencies stay out of the plugin's go.mod: goreleaser (the `tool` line of go.mod). Build
// it with `go build -o ../../.xcaddy/goreleaser github.com/goreleaser/goreleaser/v2` here.
package tools
