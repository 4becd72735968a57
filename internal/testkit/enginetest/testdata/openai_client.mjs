// The official OpenAI JavaScript client (npm `openai`, pinned in
// .ci/js/gateway/package.json) against Switchyard's gateway in front of a
// real Ollama. The module is imported from OPENAI_MODULE (an absolute path
// to the installed package) so this file can live beside the Go test.
// Prints one JSON line: what the client saw.
const { default: OpenAI } = await import(process.env.OPENAI_MODULE);
const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY, maxRetries: 0 });
const model = process.env.MODEL;

const out = {};
const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const plain = await client.chat.completions.create({
  model, max_tokens: 12, temperature: 0,
  messages: [{ role: "user", content: "The official client, through Switchyard, to a real engine." }],
});
out.plain = { text: plain.choices[0].message.content, finish: plain.choices[0].finish_reason, usage: plain.usage };

const stream = await client.chat.completions.create({
  model, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
  messages: [{ role: "user", content: "The official client, through Switchyard, to a real engine." }],
});
let text = "", chunks = 0, usage = null;
for await (const c of stream) {
  if (c.choices?.[0]?.delta?.content) { text += c.choices[0].delta.content; chunks++; }
  if (c.usage) usage = c.usage;
}
out.stream = { text, chunks, usage };

// A client that gives up mid-stream: the gateway cancels on the bus.
const ac = new AbortController();
const long = await client.chat.completions.create(
  { model, max_tokens: 4000, stream: true, messages: [{ role: "user", content: "go on" }] },
  { signal: ac.signal },
);
let seen = 0;
try {
  for await (const c of long) {
    if (c.choices?.[0]?.delta?.content) seen++;
    if (seen >= 5) ac.abort();
  }
} catch (e) {
  out.aborted = { seen, name: e.name };
}
// Depending on the client version, an abort ends the iteration or throws.
if (!out.aborted && ac.signal.aborted) out.aborted = { seen, name: "ended" };
console.log(JSON.stringify(out));
