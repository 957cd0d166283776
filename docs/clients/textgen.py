#!/usr/bin/env python3
"""A caddy-textgen client: Python 3.8+, standard library only (docs/API.md).

    TEXTGEN_KEY=tg_live_... python3 textgen.py '{"tool":"summarizer","input":"...","language":"en"}' [idempotency-key]

Streams the text to stdout as it is generated (server-sent events) and handles every error code
of the API (MESSAGES; `textgen.py --codes` prints them): a 402 says what ran out (the account's
credits, where to buy more; this key's budget, when it resets; a member's cap) and exits 2; 409,
429 and 502/503/504 are retried after Retry-After (or a backoff when there is none), up to
MAX_WAIT seconds a wait and `tries` attempts, else the APIError is raised with its retry_after;
a cut stream resumes the kept generation after its last event (GET /api/v1/generations/{id} with
Last-Event-ID), and a request cut before its answer is retried with the same Idempotency-Key, so
nothing is generated or charged twice.
"""
import http.client, json, os, sys, time, urllib.error, urllib.request, uuid

API = os.environ.get("TEXTGEN_URL", "http://localhost:8080").rstrip("/")
KEY = os.environ.get("TEXTGEN_KEY", "")
MAX_WAIT = 60  # the longest Retry-After waited out; a longer one is raised to the caller

# MESSAGES says what each error code of the API (docs/openapi.json) means for the caller; the
# server's own message adds the details.
MESSAGES = {
    "invalid_json": "the request body is not valid JSON",
    "missing_field": "a required field is missing",
    "invalid_field": "a field has a value the API does not accept",
    "unknown_field": "the request has a field the API does not know",
    "empty_input": "the input is empty",
    "invalid_utf8": "the input is not valid UTF-8 text",
    "unknown_tool": "there is no such tool (GET /api/v1/tools lists them)",
    "unsupported_language": "the tool does not support this language",
    "invalid_tone": "the tool has no such tone",
    "conflicting_api_keys": "the request carries two different API keys; send one",
    "missing_api_key": "no API key was sent (set TEXTGEN_KEY)",
    "invalid_api_key": "the API key is not valid (unknown, revoked or mistyped)",
    "key_expired": "the API key has expired; make a new one in My Account",
    "insufficient_credits": "out of credits",
    "key_budget_exhausted": "this key's budget is used up",
    "member_cap_reached": "your monthly credit cap in this organisation is used up; its owner can raise it",
    "account_disabled": "the account is disabled; contact support",
    "tool_not_allowed": "this key may not use this tool",
    "address_not_allowed": "this key may not be used from this address",
    "code_not_redeemable": "this code cannot be redeemed (unknown, disabled, expired or used up)",
    "code_already_redeemed": "this account has already redeemed this code",
    "live_key_required": "send a live key (tg_live_...) for this",
    "not_found": "no such resource",
    "method_not_allowed": "the API does not take this method here",
    "request_timeout": "the request took too long to arrive",
    "idempotency_in_progress": "a request with this Idempotency-Key is still running",
    "input_too_large": "the input is too long for the tool",
    "body_too_large": "the request body is too large",
    "unsupported_media_type": "the request body must be JSON (Content-Type: application/json)",
    "idempotency_key_reused": "this Idempotency-Key was used for another request; use a new one",
    "range_not_satisfiable": "the resume point is past the end of the text",
    "rate_limited": "too many requests; slow down",
    "too_many_concurrent_requests": "too many requests at once",
    "internal_error": "the server failed; nothing was charged",
    "backend_error": "the model failed; nothing was charged",
    "backend_unavailable": "the model server is unreachable; nothing was charged",
    "backend_timeout": "the model server took too long; nothing was charged",
    "ledger_unavailable": "the server takes no new work now; nothing was charged",
    "overloaded": "the model server is busy; nothing was charged",
}


class OutputError(Exception):
    """Writing the text failed (a closed pipe, a full disk): not a network fault, so no retry."""


class APIError(Exception):
    """An error answer: status, code, the server's message, and what it means (explanation).
    retry_after is the Retry-After in seconds (None without one); resets_at when a key's budget
    starts again (key_budget_exhausted, not for a total budget)."""

    def __init__(self, status, code, message, retry_after=None, resets_at=None):
        self.status, self.code, self.message = status, code, message
        self.retry_after, self.resets_at = retry_after, resets_at
        self.explanation = explain(code, resets_at)
        super().__init__(f"{status} {code}: {self.explanation}: {message}")


def explain(code, resets_at=None):
    """What error code means for the caller (an unknown code: the server's message says)."""
    text = MESSAGES.get(code, "the server refused the request")
    if code == "key_budget_exhausted":
        text += f"; resets at {resets_at}" if resets_at else "; it does not reset (a total budget)"
    return text


def _error(status, body, retry_after=None):
    try:
        e = json.loads(body)["error"]
        return APIError(status, e["code"], e["message"], retry_after, e.get("resets_at"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return APIError(status, "http_error", body.decode("utf-8", "replace")[:200], retry_after)


def _retry_after(headers):
    try:
        return max(float(headers.get("Retry-After")), 0)
    except (TypeError, ValueError):
        return None


def generate(body, idempotency_key=None, out=sys.stdout, tries=8, log=sys.stderr):
    """Generates one text, writing it to out as it arrives; returns the done event."""
    idempotency_key = idempotency_key or str(uuid.uuid4())
    rid, last_id, backoff = None, 0, 1.0
    for _ in range(tries):
        if rid is None:  # a new generation; the same Idempotency-Key makes a retry free
            req = urllib.request.Request(API + "/api/v1/generate", json.dumps(body).encode(), {
                "Authorization": "Bearer " + KEY, "Content-Type": "application/json",
                "Accept": "text/event-stream", "Idempotency-Key": idempotency_key})
        else:  # resume the kept generation after the last event we have, at no charge
            req = urllib.request.Request(f"{API}/api/v1/generations/{rid}", headers={
                "Authorization": "Bearer " + KEY, "Accept": "text/event-stream", "Last-Event-ID": str(last_id)})
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                rid = rid or resp.headers.get("X-Generation-Id") or resp.headers["X-Request-Id"]
                event, data, event_id = None, "", None
                for raw in resp:  # one SSE line at a time, as the server flushes them
                    line = raw.decode("utf-8").rstrip("\r\n")
                    if line.startswith("id:"):
                        event_id = int(line[3:])
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data += line[5:].strip()
                    elif line == "" and event:
                        payload = json.loads(data)
                        if event == "delta":
                            try:
                                out.write(payload["text"])
                                out.flush()
                            except OSError as err:  # not a cut stream: resuming would not help
                                raise OutputError(err) from err
                        elif event == "done":
                            return payload
                        elif event == "error":  # the model failed: nothing was charged
                            e = payload["error"]
                            raise APIError(502, e["code"], e["message"])
                        if event_id is not None:
                            last_id = event_id
                        event, data, event_id = None, "", None
            log.write("the stream ended early; resuming\n")  # no done event: cut
        except urllib.error.HTTPError as err:
            e = _error(err.code, err.read(), _retry_after(err.headers))
            if err.code in (409, 429):  # busy with this key / over a limit: wait as told
                wait = e.retry_after if e.retry_after is not None else 1
                if wait > MAX_WAIT:
                    raise e  # longer than we wait: the caller decides (e.retry_after)
                log.write(f"{e.code}: waiting {wait:.0f} s\n")
                time.sleep(max(wait, 1))
                continue
            if err.code in (502, 503, 504):  # the model server failed; nothing charged
                wait = e.retry_after if e.retry_after is not None else backoff
                if wait > MAX_WAIT:
                    raise e
                log.write(f"{e.code}: retrying in {wait:.0f} s\n")
                time.sleep(wait)
                backoff = min(backoff * 2, 30)
                continue
            raise e  # 402: what ran out; others: a request to fix (400, 401, 403, 404, 413...)
        except (OSError, http.client.HTTPException) as err:
            log.write(f"connection cut ({err}); {'resuming' if rid else 'retrying'}\n")
            time.sleep(0.2)
    raise RuntimeError("gave up after %d tries" % tries)


if __name__ == "__main__":
    if sys.argv[1:] == ["--codes"]:  # the error codes this client knows, with what it says
        print(json.dumps(MESSAGES, indent=1))
        sys.exit(0)
    if not KEY:
        sys.exit("set TEXTGEN_KEY to your API key")
    try:
        done = generate(json.loads(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
    except OutputError as e:
        sys.exit(f"writing the text failed: {e}")
    except APIError as e:
        sys.stderr.write(f"error {e}\n")
        sys.exit(2 if e.status == 402 else 1)  # 2: credits, a key's budget or a member's cap ran out
    sys.stderr.write(f"\n[request {done['request_id']}: {done['credits_used']} credit used, "
                     f"{done['credits_remaining']} left]\n")
