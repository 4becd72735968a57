// submit.mjs publishes one Switchyard request with the npm `nats` client and
// prints its final result as one JSON line. It proves a non-Go client needs
// nothing but the subject contract:
//   publish  sy.submit.<tenant>        JSON body, Nats-Msg-Id = request id
//   receive  sy.result.<tenant>.<id>   core subscription, made before publishing
//   re-read  the RESULTS stream        a direct get on the result's own subject, as a late reader would
//                                      ($JS.API.DIRECT.GET.RESULTS.sy.result.<tenant>.<id>: the one stored
//                                      read `switchyard auth` lets a tenant make, confined to its subjects)
//
// usage: NATS_URL=nats://127.0.0.1:4222 node submit.mjs <tenant> <id> '<request json>'
// optional: NATS_USER, NATS_PASSWORD, NATS_INBOX_PREFIX (needed under `switchyard auth`)
import { connect, headers, StringCodec } from "nats";

const [tenant, id, body] = process.argv.slice(2);
if (!tenant || !id || !body) {
  console.error("usage: node submit.mjs <tenant> <id> '<request json>'");
  process.exit(2);
}
const opts = { servers: process.env.NATS_URL || "nats://127.0.0.1:4222", name: "switchyard-js-client" };
if (process.env.NATS_USER) {
  opts.user = process.env.NATS_USER;
  opts.pass = process.env.NATS_PASSWORD;
}
if (process.env.NATS_INBOX_PREFIX) opts.inboxPrefix = process.env.NATS_INBOX_PREFIX;

const sc = StringCodec();
const nc = await connect(opts);
const timeoutMs = Number(process.env.TIMEOUT_MS || 20000);

const sub = nc.subscribe(`sy.result.${tenant}.${id}`, { max: 1, timeout: timeoutMs });
// The subscription must reach the server before the request can be answered.
await nc.flush();

const h = headers();
h.set("Nats-Msg-Id", id);
h.set("Content-Type", "application/json");
nc.publish(`sy.submit.${tenant}`, sc.encode(body), { headers: h });

let live;
for await (const m of sub) {
  live = JSON.parse(sc.decode(m.data));
}

// A late reader gets the same result from the stream: a direct get with
// the subject in the API subject and an empty body.
const stored = await nc.request(`$JS.API.DIRECT.GET.RESULTS.sy.result.${tenant}.${id}`, new Uint8Array(0), { timeout: timeoutMs });
if (stored.headers && stored.headers.code >= 400) {
  console.error("result not found in RESULTS:", stored.headers.code, stored.headers.description);
  process.exit(1);
}
const late = JSON.parse(sc.decode(stored.data));
if (late.id !== live.id || late.status !== live.status) {
  console.error("stream copy differs from the live result", JSON.stringify(late));
  process.exit(1);
}
console.log(JSON.stringify(live));
await nc.drain();
