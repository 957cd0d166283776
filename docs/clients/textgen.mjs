// A caddy-textgen client: fetch only, so generate() runs in Node 18+ and in browsers (docs/API.md).
//
//   TEXTGEN_KEY=tg_live_... node textgen.mjs '{"tool":"summarizer","input":"...","language":"en"}' [idempotency-key]
//
// Streams the text as it is generated (server-sent events) and handles every error class: 402
// throws with where to buy credits; 429 and 409 wait Retry-After; 502/503/504 retry with backoff;
// a cut stream resumes the kept generation after its last event (GET /api/v1/generations/{id}
// with Last-Event-ID), and a request cut before its answer is retried with the same
// Idempotency-Key, so nothing is generated or charged twice.

export class APIError extends Error {
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`);
    Object.assign(this, { status, code, detail: message });
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
      const e = await resp.json().then((b) => b.error).catch(() => ({ code: "http_error", message: resp.statusText }));
      const wait = Number(resp.headers.get("Retry-After") ?? 0);
      if (resp.status === 409 || resp.status === 429) { // busy with this key / over a limit
        log(`${e.code}: waiting ${wait} s`);
        await sleep(Math.max(wait, 1));
        continue;
      }
      if ([502, 503, 504].includes(resp.status)) { // the model server failed; nothing charged
        log(`${e.code}: retrying in ${Math.max(wait, backoff)} s`);
        await sleep(Math.max(wait, backoff));
        backoff = Math.min(backoff * 2, 30);
        continue;
      }
      throw new APIError(resp.status, e.code, e.message); // 402: the message says where to buy
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
  const key = process.env.TEXTGEN_KEY;
  if (!key) { console.error("set TEXTGEN_KEY to your API key"); process.exit(1); }
  try {
    const done = await generate({ api: (process.env.TEXTGEN_URL ?? "http://localhost:8080").replace(/\/$/, ""), key,
      body: JSON.parse(process.argv[2]), idempotencyKey: process.argv[3] || undefined,
      onText: (t) => process.stdout.write(t) });
    console.error(`\n[request ${done.request_id}: ${done.credits_used} credit used, ${done.credits_remaining} left]`);
  } catch (err) {
    if (err.status === 402) { console.error(`out of credits: ${err.detail}`); process.exit(2); }
    console.error(`error ${err.message}`);
    process.exit(1);
  }
}
