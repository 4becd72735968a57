// Drives Switchyard's OpenAI-compatible gateway with the official OpenAI
// JavaScript client (npm `openai`, pinned in package.json). Run by
// services/gateway/openai_js_test.go against a gateway whose backend
// echoes the prompt ("echo: <words>"), streams one chunk per word with a
// delay, and sheds beyond a small number of requests in flight.
//
//   OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=sk-... node test.mjs
//
// Exits non-zero on the first failed check.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const baseURL = process.env.OPENAI_BASE_URL;
const apiKey = process.env.OPENAI_API_KEY;
assert.ok(baseURL && apiKey, 'OPENAI_BASE_URL and OPENAI_API_KEY must be set');
const model = process.env.SWITCHYARD_MODEL || 'llama-3.1-8b';
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30_000 });

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (err) {
    failed++;
    console.log(`FAIL ${name}: ${err?.stack || err}`);
  }
}

await check('models list comes from the catalog', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.ok(ids.includes('auto'), `auto missing from ${ids}`);
  assert.ok(ids.includes(model), `${model} missing from ${ids}`);
});

await check('chat completion', async () => {
  const r = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: 'hello from javascript' }],
    max_tokens: 16,
    metadata: { priority: 'interactive' },
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, 'echo: hello from javascript');
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.usage.prompt_tokens, 3);
  assert.equal(r.usage.completion_tokens, 4);
});

await check('text completion', async () => {
  const r = await client.completions.create({ model, prompt: 'a b', max_tokens: 8 });
  assert.equal(r.choices[0].text, 'echo: a b');
});

await check('streamed chat: chunks arrive before the final one', async () => {
  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: 'one two three four' }],
    max_tokens: 16,
    stream: true,
    stream_options: { include_usage: true },
  });
  const arrivals = [];
  let text = '';
  let finish = null;
  let finishAt = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    const now = performance.now();
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta?.content) {
      assert.equal(finish, null, 'content after finish_reason');
      arrivals.push(now);
      text += choice.delta.content;
    }
    if (choice.finish_reason) {
      finish = choice.finish_reason;
      finishAt = now;
    }
  }
  assert.equal(text, 'echo: one two three four');
  assert.equal(finish, 'stop');
  assert.ok(usage && usage.completion_tokens === 5, `usage ${JSON.stringify(usage)}`);
  assert.ok(arrivals.length >= 3, `only ${arrivals.length} content chunks`);
  // The backend waits between tokens; a gateway that buffered the answer
  // would deliver every chunk at the same moment as the final one.
  const spread = finishAt - arrivals[0];
  assert.ok(spread > 20, `first chunk only ${spread.toFixed(1)} ms before the final one`);
});

await check('bad key is a 401 AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'sk-not-a-key', maxRetries: 0 });
  await assert.rejects(
    bad.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 4 }),
    (err) => {
      assert.ok(err instanceof OpenAI.AuthenticationError, `got ${err?.constructor?.name}`);
      assert.equal(err.status, 401);
      assert.equal(err.code, 'invalid_api_key');
      return true;
    },
  );
});

await check('bad request is a 400 BadRequestError', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: [], max_tokens: 4 }),
    (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `got ${err?.constructor?.name}`);
      assert.equal(err.status, 400);
      return true;
    },
  );
});

await check('overload is a 429 RateLimitError with Retry-After', async () => {
  const n = 10;
  const results = await Promise.allSettled(
    Array.from({ length: n }, () =>
      client.chat.completions.create({ model, messages: [{ role: 'user', content: 'a b c d' }], max_tokens: 8 }),
    ),
  );
  const ok = results.filter((r) => r.status === 'fulfilled');
  const limited = results.filter((r) => r.status === 'rejected' && r.reason instanceof OpenAI.RateLimitError);
  const other = results.filter((r) => r.status === 'rejected' && !(r.reason instanceof OpenAI.RateLimitError));
  assert.equal(other.length, 0, `unexpected errors: ${other.map((r) => r.reason).join('; ')}`);
  assert.ok(ok.length >= 1, 'nothing was served');
  assert.ok(limited.length >= 1, 'nothing was shed');
  const e = limited[0].reason;
  assert.equal(e.status, 429);
  assert.equal(e.code, 'shed');
  assert.ok(Number(e.headers.get('retry-after')) >= 1, 'no Retry-After');
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
