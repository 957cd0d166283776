"""caddy-textgen with the official OpenAI SDK for Python (pip install openai).

Written to the same shape as chat.mjs beside it (same arguments, output and exit codes); the tests
run chat.mjs, chat.sh and the Go example, not this one.

    TEXTGEN_KEY=tg_live_... python3 chat.py summarizer "The text to summarize" [language]

TEXTGEN_URL is the server (default http://localhost:8080), TEXTGEN_STREAM=1 streams the text as it
is generated, TEXTGEN_TONE sets a tone (formal, friendly, direct, professional), and
TEXTGEN_IDEMPOTENCY_KEY makes a retry safe (below). The text goes to stdout; one line of what it
cost goes to stderr. Exit codes: 0 done, 1 an error, 2 out of credits (402), 3 no such tool.
"""

import os
import sys

import openai

if len(sys.argv) < 3:
    sys.exit("usage: python3 chat.py <tool> <input> [language]")
tool, text = sys.argv[1], sys.argv[2]
language = sys.argv[3] if len(sys.argv) > 3 else None

client = openai.OpenAI(
    base_url=os.environ.get("TEXTGEN_URL", "http://localhost:8080") + "/api/v1",
    api_key=os.environ.get("TEXTGEN_KEY"),  # sent as Authorization: Bearer <key>
    # The SDK retries a failed connection, 409, 429 and 5xx answers this many times (waiting out
    # Retry-After); a 402 is never retried.
    max_retries=2,
)

# The SDK sends no Idempotency-Key of its own. Send one: if the network fails after the server
# generated the text, the SDK's retry carries the same key and gets that text again instead of
# paying a second credit.
headers = {}
if os.environ.get("TEXTGEN_IDEMPOTENCY_KEY"):
    headers["Idempotency-Key"] = os.environ["TEXTGEN_IDEMPOTENCY_KEY"]

# Fields of caddy-textgen that OpenAI has not go in extra_body; without them, the server's defaults.
extra = {}
if language:
    extra["language"] = language
if os.environ.get("TEXTGEN_TONE"):
    extra["tone"] = os.environ["TEXTGEN_TONE"]


def report(response, finish_reason, completion_tokens):
    """One line of what the answer cost, from the response headers."""
    h = response.headers
    print(
        f"credits_used={h.get('x-credits-used')} credits_remaining={h.get('x-credits-remaining')} "
        f"request_id={h.get('x-request-id')} finish_reason={finish_reason} "
        f"completion_tokens={completion_tokens}",
        file=sys.stderr,
    )


try:
    # A "model" is one of the tools: the models list holds the tools this key may call (free).
    if tool not in [m.id for m in client.models.list()]:
        print(f'no tool "{tool}" for this key (GET /api/v1/models lists them)', file=sys.stderr)
        sys.exit(3)
    request = dict(
        model=tool,
        messages=[{"role": "user", "content": text}],
        extra_body=extra,
        extra_headers=headers,
    )
    if os.environ.get("TEXTGEN_STREAM") == "1":
        with client.chat.completions.with_streaming_response.create(
            **request, stream=True, stream_options={"include_usage": True}
        ) as response:
            finish_reason = completion_tokens = None
            for chunk in response.parse():
                if chunk.choices:
                    print(chunk.choices[0].delta.content or "", end="", flush=True)
                    finish_reason = chunk.choices[0].finish_reason or finish_reason
                if chunk.usage:  # the last chunk
                    completion_tokens = chunk.usage.completion_tokens
            report(response, finish_reason, completion_tokens)
    else:
        response = client.chat.completions.with_raw_response.create(**request)
        completion = response.parse()
        print(completion.choices[0].message.content, end="")
        report(response, completion.choices[0].finish_reason, completion.usage.completion_tokens)
except openai.APIError as err:
    # err.code is caddy-textgen's error code (insufficient_credits, key_budget_exhausted, ...); a
    # model failure in the middle of a stream has no status (nothing was charged).
    status = getattr(err, "status_code", None)
    print(f"error status={status} class={type(err).__name__} code={err.code} {err.message}", file=sys.stderr)
    sys.exit(2 if status == 402 else 1)
