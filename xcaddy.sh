#!/usr/bin/env bash
# Builds Caddy with the caddy-textgen plugin into ./caddy, and runs it.
#
#   ./xcaddy.sh build   build ./caddy (with xcaddy when installed, else plain go build)
#   ./xcaddy.sh run     build, then run it with ./Caddyfile (needs Ollama and a model)
#   ./xcaddy.sh dev     build, start a local test Ollama with a tiny random model, run Caddy with
#                       ./Caddyfile against it, create a demo account and key (kept in data/dev
#                       for the next start), print a curl line and My Account's address
#   ./xcaddy.sh dev --stripe
#                       the same, with buying switched on against a local stripe-mock (installed
#                       into the test cache on first use)
#   ./xcaddy.sh pay     in a second shell, after "Buy" on My Account: pays the latest Checkout
#                       Session of dev mode, with a webhook signed as Stripe would sign it
#
# Environment: CADDY_OUT (output binary, default ./caddy); TEXTGEN_PORT (dev's HTTP port,
# default 8080) and CADDY_ADMIN (Caddy's admin address, default localhost:2019), which the
# example Caddyfile reads too; TEXTGEN_DEV_DIR (dev mode's ledger, logs and demo key, default
# ./data/dev).
set -euo pipefail
cd "$(dirname "$0")"
here=$(pwd)
out=${CADDY_OUT:-$here/caddy}
cache=${TEXTGEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/caddy-textgen}
port=${TEXTGEN_PORT:-8080}
devdir=${TEXTGEN_DEV_DIR:-$here/data/dev}

# with_progress WHAT COMMAND...: runs COMMAND and, while it runs, says every 15 seconds that it
# still does, so that a first build of a few minutes is not silent.
with_progress() {
	local what=$1 waited=0
	shift
	"$@" &
	local pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 1
		waited=$((waited + 1))
		if [ $((waited % 15)) -eq 0 ]; then
			echo "  ... still $what (${waited}s)" >&2
		fi
	done
	wait "$pid"
}

build() {
	if command -v xcaddy >/dev/null 2>&1; then
		echo "building $out with xcaddy" >&2
		xcaddy build --output "$out" --with github.com/caddy-textgen/textgen="$here"
		return
	fi
	# xcaddy is not installed (and cannot be downloaded everywhere): write the main.go it would
	# write and build that with the module's own go.mod.
	echo "building $out: Caddy with the caddy-textgen plugin, with go build (xcaddy not found)." >&2
	echo "  The first build compiles Caddy and its modules: a few minutes; later builds take seconds." >&2
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
	with_progress "building Caddy" go build -trimpath -o "$out" ./.xcaddy
	echo "built $out" >&2
}

run() {
	build
	mkdir -p data
	exec "$out" run --config Caddyfile --adapter caddyfile
}

dev() {
	local stripe=""
	case "${1:-}" in
	"") ;;
	--stripe) stripe=1 ;;
	*) echo "usage: $0 dev [--stripe]" >&2; exit 2 ;;
	esac
	build
	mkdir -p "$devdir"
	echo "building the test Ollama's launcher (backends/cmd/tinyollama)..." >&2
	with_progress "building tinyollama" go build -o .xcaddy/tinyollama ./backends/cmd/tinyollama
	if [ -z "${TEXTGEN_OLLAMA_BIN:-}" ] && [ ! -x "$cache/ollama-v0.6.8/ollama" ]; then
		echo "installing the pinned Ollama v0.6.8 into $cache (first time only: go install builds it from source with cgo, about 2 minutes)..." >&2
	fi
	with_progress "installing Ollama" .xcaddy/tinyollama -install-only >/dev/null
	echo "starting the test Ollama with a tiny random model..." >&2
	.xcaddy/tinyollama -dir "$devdir/ollama" -num-predict 48 >"$devdir/ollama.out" 2>"$devdir/ollama.log" &
	# Globals, not locals: the EXIT trap runs after dev has returned (Caddy stopped by
	# `./caddy stop`, or Ctrl-C), when its locals are gone.
	dev_ollama_pid=$!
	trap dev_cleanup EXIT
	trap 'exit 130' INT TERM
	local line
	line=$(wait_for_line "$devdir/ollama.out" OLLAMA_HOST= $dev_ollama_pid "the test Ollama" "$devdir/ollama.log")
	export OLLAMA_HOST=${line#OLLAMA_HOST=}; OLLAMA_HOST=${OLLAMA_HOST%% *}
	export TEXTGEN_MODEL=${line##*MODEL=}
	export TEXTGEN_LEDGER=$devdir/ledger
	export TEXTGEN_PORT=$port
	if [ -n "$stripe" ]; then
		echo "building the stripe-mock launcher (caddymodule/account/cmd/stripemock)..." >&2
		with_progress "building stripemock" go build -o .xcaddy/stripemock ./caddymodule/account/cmd/stripemock
		if [ -z "${TEXTGEN_STRIPE_MOCK_BIN:-}" ] && [ ! -x "$cache/stripe-mock-v0.203.0/stripe-mock" ]; then
			echo "installing stripe-mock v0.203.0 into $cache (first time only: go install, about a minute)..." >&2
		fi
		with_progress "installing stripe-mock" .xcaddy/stripemock -install-only >/dev/null
		echo "starting stripe-mock, Stripe's mock of its API..." >&2
		.xcaddy/stripemock >"$devdir/stripemock.out" 2>"$devdir/stripemock.log" &
		dev_stripe_pid=$!
		line=$(wait_for_line "$devdir/stripemock.out" STRIPE_API_URL= $dev_stripe_pid "stripe-mock" "$devdir/stripemock.log")
		export TEXTGEN_STRIPE_API_URL=${line#STRIPE_API_URL=}
		export TEXTGEN_STRIPE_SECRET_KEY=sk_test_local
		# The webhook's signing secret: made once, kept in data/dev for `./xcaddy.sh pay`.
		if [ ! -s "$devdir/stripe-webhook-secret" ]; then
			(umask 077; echo "whsec_local_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')" >"$devdir/stripe-webhook-secret")
		fi
		TEXTGEN_STRIPE_WEBHOOK_SECRET=$(cat "$devdir/stripe-webhook-secret")
		export TEXTGEN_STRIPE_WEBHOOK_SECRET
	fi
	echo "starting Caddy on http://localhost:$port..." >&2
	"$out" run --config Caddyfile --adapter caddyfile >"$devdir/caddy.log" 2>&1 &
	dev_caddy_pid=$!
	for _ in $(seq 1 120); do
		"$out" textgen ledger verify --json >/dev/null 2>&1 && break
		kill -0 $dev_caddy_pid 2>/dev/null || { echo "Caddy failed to start; see $devdir/caddy.log" >&2; exit 1; }
		sleep 0.5
	done
	# The demo account and key of an earlier start, while the ledger still has them; else new ones.
	local acct="" key=""
	if [ -s "$devdir/demo.env" ]; then
		acct=$(sed -n 's/^DEMO_ACCOUNT=//p' "$devdir/demo.env")
		key=$(sed -n 's/^DEMO_KEY=//p' "$devdir/demo.env")
		"$out" textgen account get --account "$acct" --json >/dev/null 2>&1 || { acct=""; key=""; }
	fi
	if [ -z "$acct" ] || [ -z "$key" ]; then
		acct=$("$out" textgen account create --email "demo-$(date +%s)@example.com" --json | sed -n 's/.*"id": *"\([^"]*\)".*/\1/p')
		key=$("$out" textgen key create --account "$acct" --name demo --json | sed -n 's/.*"key": *"\([^"]*\)".*/\1/p')
		(umask 077; printf 'DEMO_ACCOUNT=%s\nDEMO_KEY=%s\n' "$acct" "$key" >"$devdir/demo.env")
	fi
	# Once per account: the reference makes a second grant a no-op.
	"$out" textgen credits grant --account "$acct" --credits 10 --reference "dev-$acct" --json >/dev/null
	local available
	available=$("$out" textgen balance --account "$acct" --json | sed -n 's/.*"available": *\([0-9-]*\).*/\1/p' | head -1)
	local buying="buying is off: ./xcaddy.sh dev --stripe switches it on, against a local stripe-mock"
	if [ -n "$stripe" ]; then
		buying="buying is on, against a local stripe-mock: after \"Buy\" (the browser lands on a
page that does not exist; come back with the back button), pay it with ./xcaddy.sh pay
in a second shell"
	elif [ -n "${TEXTGEN_STRIPE_SECRET_KEY:-}" ]; then
		buying="buying goes to ${TEXTGEN_STRIPE_API_URL:-https://api.stripe.com}"
	fi
	cat <<MSG

caddy-textgen dev mode is running on http://localhost:$port (Caddy log: $devdir/caddy.log).
The model is a tiny model with random weights: it writes random text, not answers. It exists so you
can try the whole API flow (keys, credits, streaming, errors) without a real model. Its context
window is 8,192 tokens, about a token a character, so each tool takes a shorter input than
max_input_chars: GET http://localhost:$port/api/v1/tools states each tool's limit (max_input_chars),
and a longer input is refused with 413 input_too_large, free.

My Account: http://localhost:$port/account/ (sign up with any address for an account of your own:
it gets 50 live credits for its live keys, signup_credits in ./Caddyfile, and 50 test
credits for its test keys; $buying).

Demo account $acct has ${available:-10} credits. Try:

  curl -N http://localhost:$port/api/v1/generate \\
    -H 'Authorization: Bearer $key' -H 'Content-Type: application/json' \\
    -d '{"tool":"email-writer","input":"Ask my landlord to fix the heating","language":"en","tone":"friendly"}' -i

Press Ctrl-C to stop.
MSG
	wait $dev_caddy_pid || true
}

# wait_for_line FILE PREFIX PID WHAT LOG: waits until FILE has a line that starts with PREFIX and
# prints it, while PID runs (up to 10 minutes).
wait_for_line() {
	local file=$1 prefix=$2 pid=$3 what=$4 log=$5 line=""
	for _ in $(seq 1 600); do
		line=$(grep -m1 "^$prefix" "$file" 2>/dev/null || true)
		[ -n "$line" ] && break
		kill -0 "$pid" 2>/dev/null || { echo "$what failed to start; see $log" >&2; exit 1; }
		sleep 1
	done
	[ -n "$line" ] || { echo "$what did not start in time; see $log" >&2; exit 1; }
	echo "$line"
}

# pay completes a local purchase: the latest Checkout Session that dev mode's Caddy logged,
# with a webhook signed with dev mode's secret, as Stripe would send it once paid.
pay() {
	[ -x "$out" ] || { echo "$out is not built: start ./xcaddy.sh dev --stripe first" >&2; exit 1; }
	[ -f "$devdir/caddy.log" ] || { echo "no dev mode log ($devdir/caddy.log): start ./xcaddy.sh dev --stripe first" >&2; exit 1; }
	if [ -z "${TEXTGEN_STRIPE_WEBHOOK_SECRET:-}" ]; then
		[ -s "$devdir/stripe-webhook-secret" ] || { echo "no webhook secret: start ./xcaddy.sh dev --stripe first" >&2; exit 1; }
		TEXTGEN_STRIPE_WEBHOOK_SECRET=$(cat "$devdir/stripe-webhook-secret")
		export TEXTGEN_STRIPE_WEBHOOK_SECRET
	fi
	exec "$out" textgen stripe webhook --latest-from "$devdir/caddy.log" --url "http://localhost:$port/account/stripe/webhook" "$@"
}

# dev_cleanup stops what dev started: Caddy, and the test Ollama (tinyollama stops its `ollama
# serve` and the model runner on SIGTERM).
dev_ollama_pid=""
dev_caddy_pid=""
dev_stripe_pid=""
dev_cleanup() {
	trap - EXIT
	for pid in $dev_caddy_pid $dev_stripe_pid $dev_ollama_pid; do
		kill "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
}

case "${1:-build}" in
build) build ;;
run) run ;;
dev) shift; dev "$@" ;;
pay) shift; pay "$@" ;;
*) echo "usage: $0 [build|run|dev [--stripe]|pay]" >&2; exit 2 ;;
esac
