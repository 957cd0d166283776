#!/usr/bin/env python3
"""A caddy-textgen client: Python 3.8+, standard library only (docs/API.md).

    TEXTGEN_KEY=tg_live_... python3 textgen.py '{"tool":"summarizer","input":"...","language":"en"}' [idempotency-key]

Streams the text to stdout as it is generated (server-sent events) and handles every error class:
402 prints where to buy credits (exit 2); 429 and 409 wait Retry-After; 502/503/504 retry with
backoff; a cut stream resumes the kept generation after its last event (GET
/api/v1/generations/{id} with Last-Event-ID), and a request cut before its answer is retried with
the same Idempotency-Key, so nothing is generated or charged twice.
"""
import http.client, json, os, sys, time, urllib.error, urllib.request, uuid

API = os.environ.get("TEXTGEN_URL", "http://localhost:8080").rstrip("/")
KEY = os.environ.get("TEXTGEN_KEY", "")


class OutputError(Exception):
    """Writing the text failed (a closed pipe, a full disk): not a network fault, so no retry."""


class APIError(Exception):
    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


def _error(status, body):
    try:
        e = json.loads(body)["error"]
        return APIError(status, e["code"], e["message"])
    except (ValueError, KeyError, TypeError):
        return APIError(status, "http_error", body.decode("utf-8", "replace")[:200])


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
            e = _error(err.code, err.read())
            wait = float(err.headers.get("Retry-After") or 0)
            if err.code == 402:
                raise e  # the message says where to buy credits
            if err.code in (409, 429):  # busy with this key / over a limit: wait as told
                log.write(f"{e.code}: waiting {wait:.0f} s\n")
                time.sleep(max(wait, 1))
                continue
            if err.code in (502, 503, 504):  # the model server failed; nothing charged
                log.write(f"{e.code}: retrying in {max(wait, backoff):.0f} s\n")
                time.sleep(max(wait, backoff))
                backoff = min(backoff * 2, 30)
                continue
            raise e  # a request to fix: 400, 401, 403, 404, 413...
        except (OSError, http.client.HTTPException) as err:
            log.write(f"connection cut ({err}); {'resuming' if rid else 'retrying'}\n")
            time.sleep(0.2)
    raise RuntimeError("gave up after %d tries" % tries)


if __name__ == "__main__":
    if not KEY:
        sys.exit("set TEXTGEN_KEY to your API key")
    try:
        done = generate(json.loads(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
    except OutputError as e:
        sys.exit(f"writing the text failed: {e}")
    except APIError as e:
        if e.status == 402:
            sys.stderr.write(f"out of credits: {e.message}\n")
            sys.exit(2)
        sys.exit(f"error {e}")
    sys.stderr.write(f"\n[request {done['request_id']}: {done['credits_used']} credit used, "
                     f"{done['credits_remaining']} left]\n")
