// A caddy-textgen client: fetch only, so generate() runs in Node 18+ and in browsers (docs/API.md).
//
//   TEXTGEN_KEY=tg_live_... node textgen.mjs '{"tool":"summarizer","input":"...","language":"en"}' [idempotency-key]
//
// Streams the text as it is generated (server-sent events) and handles every error code of the
// API (MESSAGES; `node textgen.mjs --codes` prints them): a 402 throws with what ran out (the
// account's credits, where to buy more; this key's budget, when it resets; a member's cap); 409,
// 429 and 502/503/504 are retried after Retry-After (or a backoff when there is none), up to
// MAX_WAIT seconds a wait and `tries` attempts, else the APIError is thrown with its retryAfter;
// a cut stream resumes the kept generation after its last event (GET /api/v1/generations/{id}
// with Last-Event-ID), and a request cut before its answer is retried with the same
// Idempotency-Key, so nothing is generated or charged twice.

// MAX_WAIT is the longest Retry-After waited out (seconds); a longer one is thrown to the caller.
export const MAX_WAIT = 60;

// MESSAGES says what each error code of the API (docs/openapi.json) means for the caller; the
// server's own message adds the details.
export const MESSAGES = {
  invalid_json: "the request body is not valid JSON",
  missing_field: "a required field is missing",
  invalid_field: "a field has a value the API does not accept",
  unknown_field: "the request has a field the API does not know",
  empty_input: "the input is empty",
  invalid_utf8: "the input is not valid UTF-8 text",
  unknown_tool: "there is no such tool (GET /api/v1/tools lists them)",
  unsupported_language: "the tool does not support this language",
  invalid_tone: "the tool has no such tone",
  conflicting_api_keys: "the request carries two different API keys; send one",
  missing_api_key: "no API key was sent (set TEXTGEN_KEY)",
  invalid_api_key: "the API key is not valid (unknown, revoked or mistyped)",
  key_expired: "the API key has expired; make a new one in My Account",
  insufficient_credits: "out of credits",
  key_budget_exhausted: "this key's budget is used up",
  member_cap_reached: "your monthly credit cap in this organisation is used up; its owner can raise it",
  account_disabled: "the account is disabled; contact support",
  tool_not_allowed: "this key may not use this tool",
  address_not_allowed: "this key may not be used from this address",
  code_not_redeemable: "this code cannot be redeemed (unknown, disabled, expired or used up)",
  code_already_redeemed: "this account has already redeemed this code",
  live_key_required: "send a live key (tg_live_...) for this",
  not_found: "no such resource",
  method_not_allowed: "the API does not take this method here",
  request_timeout: "the request took too long to arrive",
  idempotency_in_progress: "a request with this Idempotency-Key is still running",
  input_too_large: "the input is too long for the tool",
  body_too_large: "the request body is too large",
  unsupported_media_type: "the request body must be JSON (Content-Type: application/json)",
  idempotency_key_reused: "this Idempotency-Key was used for another request; use a new one",
  range_not_satisfiable: "the resume point is past the end of the text",
  rate_limited: "too many requests; slow down",
  too_many_concurrent_requests: "too many requests at once",
  internal_error: "the server failed; nothing was charged",
  backend_error: "the model failed; nothing was charged",
  backend_unavailable: "the model server is unreachable; nothing was charged",
  backend_timeout: "the model server took too long; nothing was charged",
  ledger_unavailable: "the server takes no new work now; nothing was charged",
  overloaded: "the model server is busy; nothing was charged",
};

// explain is what error code means for the caller (an unknown code: the server's message says).
export function explain(code, resetsAt) {
  let text = MESSAGES[code] ?? "the server refused the request";
  if (code === "key_budget_exhausted") text += resetsAt ? `; resets at ${resetsAt}` : "; it does not reset (a total budget)";
  return text;
}

// APIError is an error answer: status, code, the server's message (detail) and what it means
// (explanation); retryAfter is Retry-After in seconds (null without one), resetsAt when a key's
// budget starts again.
export class APIError extends Error {
  constructor(status, code, message, retryAfter = null, resetsAt = null) {
    const explanation = explain(code, resetsAt);
    super(`${status} ${code}: ${explanation}: ${message}`);
    Object.assign(this, { status, code, detail: message, explanation, retryAfter, resetsAt });
  }
}

// OutputError is a failure of onText (the caller's own code): not a cut stream, so no resume.
export class OutputError extends Error {
  constructor(cause) {
    super(`onText failed: ${cause?.message ?? cause}`, { cause });
  }
}

const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));

// generate streams one text to onText and resolves with the done event.
export async function generate({ api, key, body, idempotencyKey = crypto.randomUUID(), onText, log = console.error, tries = 8 }) {
  let rid = null, lastId = 0, backoff = 1;
  for (let i = 0; i < tries; i++) {
    const headers = { Authorization: `Bearer ${key}`, Accept: "text/event-stream" };
    let resp;
    try {
      resp = rid === null // a new generation; the same Idempotency-Key makes a retry free
        ? await fetch(`${api}/api/v1/generate`, { method: "POST", body: JSON.stringify(body),
            headers: { ...headers, "Content-Type": "application/json", "Idempotency-Key": idempotencyKey } })
        // resume the kept generation after the last event we have, at no charge
        : await fetch(`${api}/api/v1/generations/${rid}`, { headers: { ...headers, "Last-Event-ID": String(lastId) } });
    } catch (err) {
      log(`connection failed (${err.message}); retrying`);
      await sleep(0.2);
      continue;
    }
    if (!resp.ok) {
      const e = await resp.json().then((b) => b.error).catch(() => null) ?? { code: "http_error", message: resp.statusText };
      const ra = resp.headers.get("Retry-After");
      const retryAfter = ra !== null && Number.isFinite(Number(ra)) ? Math.max(Number(ra), 0) : null;
      const err = new APIError(resp.status, e.code, e.message, retryAfter, e.resets_at ?? null);
      if (resp.status === 409 || resp.status === 429) { // busy with this key / over a limit
        const wait = retryAfter ?? 1;
        if (wait > MAX_WAIT) throw err; // longer than we wait: the caller decides (err.retryAfter)
        log(`${e.code}: waiting ${wait} s`);
        await sleep(Math.max(wait, 1));
        continue;
      }
      if ([502, 503, 504].includes(resp.status)) { // the model server failed; nothing charged
        const wait = retryAfter ?? backoff;
        if (wait > MAX_WAIT) throw err;
        log(`${e.code}: retrying in ${wait} s`);
        await sleep(wait);
        backoff = Math.min(backoff * 2, 30);
        continue;
      }
      throw err; // 402: what ran out; others: a request to fix (400, 401, 403, 404, 413...)
    }
    rid ??= resp.headers.get("X-Generation-Id") ?? resp.headers.get("X-Request-Id");
    try {
      const done = await readEvents(resp.body, (event, data, id) => {
        if (event === "delta") {
          try { onText(data.text); } catch (err) { throw new OutputError(err); } // not a cut: no resume
        }
        if (event === "error") throw new APIError(502, data.error.code, data.error.message); // nothing charged
        if (id !== null) lastId = id;
      });
      if (done) return done;
      log("the stream ended early; resuming");
    } catch (err) {
      if (err instanceof APIError || err instanceof OutputError) throw err;
      log(`connection cut (${err.message}); resuming`);
    }
  }
  throw new Error(`gave up after ${tries} tries`);
}

// readEvents calls onEvent for every SSE event of stream and returns the done event's data
// (null if the stream ends without one).
async function readEvents(stream, onEvent) {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return null;
    buf += value;
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let event = null, data = "", id = null;
      for (const line of block.split("\n")) {
        if (line.startsWith("id:")) id = Number(line.slice(3));
        else if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trim();
      }
      if (event === null) continue; // a keep-alive comment
      const payload = JSON.parse(data);
      if (event === "done") return payload;
      onEvent(event, payload, id);
    }
  }
}

// The command line (Node only).
if (typeof process !== "undefined" && process.argv[1]?.endsWith("textgen.mjs")) {
  if (process.argv[2] === "--codes") { // the error codes this client knows, with what it says
    console.log(JSON.stringify(MESSAGES, null, 1));
    process.exit(0);
  }
  const key = process.env.TEXTGEN_KEY;
  if (!key) { console.error("set TEXTGEN_KEY to your API key"); process.exit(1); }
  try {
    const done = await generate({ api: (process.env.TEXTGEN_URL ?? "http://localhost:8080").replace(/\/$/, ""), key,
      body: JSON.parse(process.argv[2]), idempotencyKey: process.argv[3] || undefined,
      onText: (t) => process.stdout.write(t) });
    console.error(`\n[request ${done.request_id}: ${done.credits_used} credit used, ${done.credits_remaining} left]`);
  } catch (err) {
    console.error(`error ${err.message}`);
    process.exit(err.status === 402 ? 2 : 1); // 2: credits, a key's budget or a member's cap ran out
  }
}
