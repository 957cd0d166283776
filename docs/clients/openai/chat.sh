#!/usr/bin/env bash
# caddy-textgen's OpenAI-compatible API with curl:
#
#   TEXTGEN_KEY=tg_live_... ./chat.sh summarizer "The text to summarize" [language]
#
# TEXTGEN_URL is the server (default http://localhost:8080), TEXTGEN_STREAM=1 streams the text as
# server-sent events, TEXTGEN_TONE sets a tone, TEXTGEN_IDEMPOTENCY_KEY makes a retry safe (the
# same key again gets the first answer's text, never a second charge). The answer (JSON, or the
# events) goes to stdout as it is; the status and the credit headers go to stderr. Exit codes: 0
# done, 1 an error (also a stream that ends with an error event), 2 out of credits (402).
set -euo pipefail

if [ $# -lt 2 ]; then
	echo "usage: chat.sh <tool> <input> [language]" >&2
	exit 1
fi
url=${TEXTGEN_URL:-http://localhost:8080}

# json quotes a string for JSON.
json() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\n'/\\n}
	s=${s//$'\r'/\\r}
	s=${s//$'\t'/\\t}
	printf '"%s"' "$s"
}

# model is the tool; language and tone are fields of caddy-textgen beside OpenAI's.
body="{\"model\":$(json "$1"),\"messages\":[{\"role\":\"user\",\"content\":$(json "$2")}]"
[ -n "${3:-}" ] && body+=",\"language\":$(json "$3")"
[ -n "${TEXTGEN_TONE:-}" ] && body+=",\"tone\":$(json "$TEXTGEN_TONE")"
[ "${TEXTGEN_STREAM:-}" = 1 ] && body+=',"stream":true,"stream_options":{"include_usage":true}'
body+="}"

args=(-sS -N -H "Authorization: Bearer $TEXTGEN_KEY" -H 'Content-Type: application/json')
[ -n "${TEXTGEN_IDEMPOTENCY_KEY:-}" ] && args+=(-H "Idempotency-Key: $TEXTGEN_IDEMPOTENCY_KEY")

headers=$(mktemp)
answer=$(mktemp)
trap 'rm -f "$headers" "$answer"' EXIT
curl "${args[@]}" -D "$headers" --data-binary "$body" "$url/api/v1/chat/completions" | tee "$answer" || exit 1
echo

# header prints the value of a response header; status is the answer's status code.
header() { tr -d '\r' <"$headers" | awk -v h="$1:" 'tolower($1) == tolower(h) { v = $2 } END { print v }'; }
status=$(tr -d '\r' <"$headers" | awk '/^HTTP\// { s = $2 } END { print s }')
echo "status=$status credits_used=$(header X-Credits-Used) credits_remaining=$(header X-Credits-Remaining) request_id=$(header X-Request-Id)" >&2
# A stream that the model broke off ends with an error event (the status was already 200).
if grep -q '^data: *{ *"error"' "$answer"; then
	echo "the stream ended with an error; nothing was charged" >&2
	exit 1
fi
case $status in
2??) exit 0 ;;
402) exit 2 ;;
*) exit 1 ;;
esac
