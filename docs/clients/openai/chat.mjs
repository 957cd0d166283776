// caddy-textgen with the official OpenAI SDK for JavaScript (npm install openai; Node 18+):
//
//   TEXTGEN_KEY=tg_live_... node chat.mjs summarizer "The text to summarize" [language]
//
// TEXTGEN_URL is the server (default http://localhost:8080), TEXTGEN_STREAM=1 streams the text as
// it is generated, TEXTGEN_TONE sets a tone (formal, friendly, direct, professional), and
// TEXTGEN_IDEMPOTENCY_KEY makes a retry safe (below). The text goes to stdout; one line of what it
// cost goes to stderr. Exit codes: 0 done, 1 an error, 2 out of credits (402), 3 no such tool.
import OpenAI from "openai";

const [tool, input, language] = process.argv.slice(2);
if (!tool || !input) {
  console.error("usage: node chat.mjs <tool> <input> [language]");
  process.exit(1);
}

const client = new OpenAI({
  baseURL: `${process.env.TEXTGEN_URL ?? "http://localhost:8080"}/api/v1`,
  apiKey: process.env.TEXTGEN_KEY, // sent as Authorization: Bearer <key>
  // The SDK retries a failed connection, 409, 429 and 5xx answers this many times (waiting out
  // Retry-After); a 402 is never retried.
  maxRetries: 2,
});

// The SDK sends no Idempotency-Key of its own. Send one: if the network fails after the server
// generated the text, the SDK's retry carries the same key and gets that text again instead of
// paying a second credit.
const headers = {};
if (process.env.TEXTGEN_IDEMPOTENCY_KEY) headers["Idempotency-Key"] = process.env.TEXTGEN_IDEMPOTENCY_KEY;

// A "model" is one of the tools: the models list holds the tools this key may call (free).
async function checkTool() {
  for await (const model of client.models.list()) {
    if (model.id === tool) return;
  }
  console.error(`no tool "${tool}" for this key (GET /api/v1/models lists them)`);
  process.exit(3);
}

// One line of what the answer cost, from the response headers.
function report(response, finishReason, completionTokens) {
  const h = (name) => response.headers.get(name);
  console.error(
    `credits_used=${h("x-credits-used")} credits_remaining=${h("x-credits-remaining")} ` +
      `request_id=${h("x-request-id")} finish_reason=${finishReason} completion_tokens=${completionTokens}`,
  );
}

try {
  await checkTool();
  const request = {
    model: tool,
    messages: [{ role: "user", content: input }],
    // Fields of caddy-textgen that OpenAI has not: plain fields of the request (JavaScript lets
    // them through; in TypeScript add them with a cast). Without them: the server's defaults.
    ...(language && { language }),
    ...(process.env.TEXTGEN_TONE && { tone: process.env.TEXTGEN_TONE }),
  };
  if (process.env.TEXTGEN_STREAM === "1") {
    const { data: stream, response } = await client.chat.completions
      .create({ ...request, stream: true, stream_options: { include_usage: true } }, { headers })
      .withResponse();
    let finishReason, completionTokens;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (choice?.delta?.content) process.stdout.write(choice.delta.content);
      if (choice?.finish_reason) finishReason = choice.finish_reason;
      if (chunk.usage) completionTokens = chunk.usage.completion_tokens; // the last chunk
    }
    report(response, finishReason, completionTokens);
  } else {
    const { data: completion, response } = await client.chat.completions
      .create(request, { headers })
      .withResponse();
    process.stdout.write(completion.choices[0].message.content);
    report(response, completion.choices[0].finish_reason, completion.usage.completion_tokens);
  }
} catch (err) {
  if (!(err instanceof OpenAI.APIError)) throw err;
  // err.code is caddy-textgen's error code (insufficient_credits, key_budget_exhausted, ...);
  // a model failure in the middle of a stream has no status (nothing was charged).
  console.error(`error status=${err.status} class=${err.constructor.name} code=${err.code} ${err.message}`);
  process.exit(err.status === 402 ? 2 : 1);
}
