#!/usr/bin/env bash
# Builds Caddy with the caddy-textgen plugin into ./caddy, and runs it.
#
#   ./xcaddy.sh build   build ./caddy (with xcaddy when installed, else plain go build)
#   ./xcaddy.sh run     build, then run it with ./Caddyfile (needs Ollama and a model)
#   ./xcaddy.sh dev     build, start a local test Ollama with a tiny random model, run Caddy with
#                       ./Caddyfile against it, create a demo account and key, print a curl line
#                       and My Account's address
#
# Environment: CADDY_OUT (output binary, default ./caddy).
set -euo pipefail
cd "$(dirname "$0")"
here=$(pwd)
out=${CADDY_OUT:-$here/caddy}
cache=${TEXTGEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/caddy-textgen}

build() {
	if command -v xcaddy >/dev/null 2>&1; then
		echo "building $out with xcaddy" >&2
		xcaddy build --output "$out" --with github.com/caddy-textgen/textgen="$here"
		return
	fi
	# xcaddy is not installed (and cannot be downloaded everywhere): write the main.go it would
	# write and build that with the module's own go.mod.
	echo "building $out with go build (xcaddy not found)" >&2
	mkdir -p .xcaddy
	cat > .xcaddy/main.go <<'GO'
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	// plug in Caddy modules here
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/caddy-textgen/textgen"
)

func main() {
	caddycmd.Main()
}
GO
	go build -trimpath -o "$out" ./.xcaddy
}

run() {
	build
	mkdir -p data
	exec "$out" run --config Caddyfile --adapter caddyfile
}

dev() {
	build
	local devdir=$here/data/dev
	mkdir -p "$devdir"
	echo "starting the test Ollama with a tiny random model (first time: builds Ollama v0.6.8, a few minutes)" >&2
	go build -o .xcaddy/tinyollama ./backends/cmd/tinyollama
	.xcaddy/tinyollama -dir "$devdir/ollama" -num-predict 48 >"$devdir/ollama.out" 2>"$devdir/ollama.log" &
	# Globals, not locals: the EXIT trap runs after dev has returned (Caddy stopped by
	# `./caddy stop`, or Ctrl-C), when its locals are gone.
	dev_ollama_pid=$!
	trap dev_cleanup EXIT
	trap 'exit 130' INT TERM
	local line=""
	for _ in $(seq 1 600); do
		line=$(grep -m1 '^OLLAMA_HOST=' "$devdir/ollama.out" 2>/dev/null || true)
		[ -n "$line" ] && break
		kill -0 $dev_ollama_pid 2>/dev/null || { echo "the test Ollama failed to start; see $devdir/ollama.log" >&2; exit 1; }
		sleep 1
	done
	[ -n "$line" ] || { echo "the test Ollama did not start in time; see $devdir/ollama.log" >&2; exit 1; }
	export OLLAMA_HOST=${line#OLLAMA_HOST=}; OLLAMA_HOST=${OLLAMA_HOST%% *}
	export TEXTGEN_MODEL=${line##*MODEL=}
	export TEXTGEN_LEDGER=$devdir/ledger
	"$out" run --config Caddyfile --adapter caddyfile >"$devdir/caddy.log" 2>&1 &
	dev_caddy_pid=$!
	for _ in $(seq 1 60); do
		"$out" textgen ledger verify --json >/dev/null 2>&1 && break
		kill -0 $dev_caddy_pid 2>/dev/null || { echo "Caddy failed to start; see $devdir/caddy.log" >&2; exit 1; }
		sleep 0.5
	done
	local acct key
	acct=$("$out" textgen account create --email "demo-$(date +%s)@example.com" --json | sed -n 's/.*"id": *"\([^"]*\)".*/\1/p')
	key=$("$out" textgen key create --account "$acct" --name demo --json | sed -n 's/.*"key": *"\([^"]*\)".*/\1/p')
	"$out" textgen credits grant --account "$acct" --credits 10 --reference "dev-$acct" --json >/dev/null
	local buying="buying is off: set the Stripe variables, docs/ACCOUNT.md \"Try a purchase locally\""
	if [ -n "${TEXTGEN_STRIPE_SECRET_KEY:-}" ]; then
		buying="buying goes to ${TEXTGEN_STRIPE_API_URL:-https://api.stripe.com}; complete a local purchase with
./caddy textgen stripe webhook --account <id> --session <cs_...>, both from the 'checkout session created' line of the log"
	fi
	cat <<MSG

caddy-textgen dev mode is running on http://localhost:8080 (Caddy log: $devdir/caddy.log).
The model is a tiny model with random weights: it writes random text, not answers. It exists so you
can try the whole API flow (keys, credits, streaming, errors) without a real model. Its context
window is 8,192 tokens, about a token a character, so each tool takes a shorter input than
max_input_chars: GET http://localhost:8080/api/v1/tools states each tool's limit (max_input_chars),
and a longer input is refused with 413 input_too_large, free.

My Account: http://localhost:8080/account/ (sign up with any address for an account of your own,
with free test credits; $buying).

Demo account $acct has 10 credits. Try:

  curl -N http://localhost:8080/api/v1/generate \\
    -H 'Authorization: Bearer $key' -H 'Content-Type: application/json' \\
    -d '{"tool":"email-writer","input":"Ask my landlord to fix the heating","language":"en","tone":"friendly"}' -i

Press Ctrl-C to stop.
MSG
	wait $dev_caddy_pid || true
}

# dev_cleanup stops what dev started: Caddy, and the test Ollama (tinyollama stops its `ollama
# serve` and the model runner on SIGTERM).
dev_ollama_pid=""
dev_caddy_pid=""
dev_cleanup() {
	trap - EXIT
	for pid in $dev_caddy_pid $dev_ollama_pid; do
		kill "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
}

case "${1:-build}" in
build) build ;;
run) run ;;
dev) dev ;;
*) echo "usage: $0 [build|run|dev]" >&2; exit 2 ;;
esac
