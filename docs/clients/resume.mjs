// A client that survives a cut stream: Node 18+ (or a browser without the last lines).
const API = process.env.TEXTGEN_URL ?? "http://127.0.0.1:8080", KEY = process.env.TEXTGEN_KEY;

export async function generate(body, idempotencyKey, tries = 5) {
  let got = Buffer.alloc(0), rid = null;
  for (let i = 0; i < tries; i++) {
    const resp = await (rid === null // generate; a retry with the same Idempotency-Key is never charged twice
      ? fetch(`${API}/api/v1/generate`, { method: "POST", body: JSON.stringify(body), headers: {
          "X-API-Key": KEY, "Content-Type": "application/json", "Idempotency-Key": idempotencyKey } })
      // resume the kept generation where the cut stream stopped, at no charge
      : fetch(`${API}/api/v1/generations/${rid}`, { headers: {
          "X-API-Key": KEY, Accept: "text/plain", Range: `bytes=${got.length}-` } })).catch(() => null);
    if (resp && !resp.ok) throw new Error(`${resp.status}: ${await resp.text()}`); // an answer, not a cut
    if (!resp) continue;
    rid ??= resp.headers.get("X-Generation-Id") ?? resp.headers.get("X-Request-Id");
    try {
      for await (const chunk of resp.body) got = Buffer.concat([got, chunk]);
      return got.toString("utf8");
    } catch { /* cut: try again */ }
  }
  throw new Error("the stream was cut too often");
}

if (process.argv[1]?.endsWith("resume.mjs")) process.stdout.write(await generate(JSON.parse(process.argv[2]), process.argv[3]));
