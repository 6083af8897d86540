import { createHash } from "node:crypto";
import { readdirSync } from "node:fs";
import path from "node:path";
import { type Command, Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { keySlot, type LocalCluster, startCluster } from "../../helpers/cluster.js";
import { startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { type Receiver, startReceiver } from "../../helpers/receiver.js";
import { connectRedis, dropPrefix } from "../../helpers/redis.js";
import { waitFor } from "../../helpers/wait.js";
import { HTTP_ESM, TIMER_CJS } from "../api/support.js";

/**
 * Hash-slot lint (SPEC §8 "Hash-tag discipline", issue 13 groundwork): every multi-key atomic step
 * the daemon issues — each Lua script (ours in `src/store/scripts/` and BullMQ's), each MULTI/EXEC,
 * each command with several keys — must touch keys of ONE hash slot, or Redis Cluster refuses it
 * with CROSSSLOT.
 *
 * How: every command any ioredis connection of this test worker sends passes through
 * `Redis.prototype.sendCommand` (plain commands, auto-pipelines, MULTI blocks, EVAL/EVALSHA of
 * `defineScript` and of BullMQ). The test wraps it (observing only; the commands still go to the
 * real Redis unchanged), then drives a whole in-process daemon through its HTTP API with a
 * representative workload, groups the observed commands into atomic units, and computes the slot
 * of each unit's keys with `cluster-key-slot` (what ioredis's Cluster client uses). The store code
 * cannot take a Cluster client yet (`StoreContext.redis` is a `Redis`; the daemon refuses
 * REDIS_CLUSTER_NODES), so the workload runs on the single test Redis.
 *
 * Explicit pipelines are units too: not atomic, but ioredis's Cluster client sends a pipeline to
 * one node only. The first test also requires every script of `src/store/scripts/` to have run.
 *
 * The second test replays every atomic unit, in the order sent, on a real 3-master Redis Cluster
 * (test/helpers/cluster.ts), each on the node that owns its first key's slot, and asks the server:
 * it also sees keys a script touches without declaring them (built from ARGV), which no
 * client-side lint can.
 *
 * Known violations are listed in KNOWN_CROSS_SLOT with the reason (docs/decisions.md "Redis
 * Cluster groundwork"): the test is green today and fails on any NEW cross-slot unit, and on an
 * allow-list entry that no longer happens (remove it then).
 */

/**
 * Known cross-slot units, by `<who> <tags>`: who is `script <name>`, `MULTI at <file> <function>`,
 * `PIPELINE at <file> <function>` or `<COMMAND> at <file> <function>`; tags are the hash-tag
 * classes of its keys (`{global}` is `{<prefix>}`, `{shard}` a shard's `{<prefix>.g<i>.<n>}` (a
 * user's keys and the shard's outbox), `{user}` layout 1's `{u_…}`, `{bull}` BullMQ's). Each with
 * the reason and the fix Milestone 1 plans (docs/decisions.md "Redis Cluster groundwork"); the
 * cross-tag writes fixed since are in docs/decisions.md "Cross-tag writes".
 */
const KNOWN_CROSS_SLOT: Readonly<Record<string, string>> = {
  "XREADGROUP at src/store/shard-streams.ts OutboxStream.readGroup {shard}":
    'on one node fan-out reads every shard outbox in one blocking XREADGROUP (one read group); on a Cluster each shard is a read group of its own, one slot each (docs/decisions.md "Sharded outbox"; test/integration/events/outbox-cluster.test.ts)',
  "XREADGROUP at src/store/shard-streams.ts RunStream.readGroup {shard}":
    'on one node run consumers read every shard run stream in one blocking XREADGROUP (one read group); on a Cluster each shard is a read group of its own, as for the outbox (docs/decisions.md "Source runs from a stream")',
};

type Kind = "script" | "multi" | "command" | "pipeline";

interface Unit {
  readonly kind: Kind;
  /** Script name, or the command name(s). */
  readonly name: string;
  /** The first `src/` frame that issued it (file:function). */
  readonly site: string;
  readonly keys: readonly string[];
  /** The commands as sent, for the replay on the cluster (EVALSHA already turned into EVAL). */
  readonly commands: readonly (readonly (string | Buffer | number)[])[];
}

const ROOT = path.resolve(import.meta.dirname, "../../..");

/** sha1 -> {name, lua} of every script of `src/store/scripts/`, and of BullMQ's as they are seen. */
const scriptsBySha = new Map<string, { name: string; lua: string }>();

async function loadOurScripts(): Promise<void> {
  const dir = path.join(ROOT, "src/store/scripts");
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".ts"))) {
    const mod: Record<string, unknown> = await import(path.join(dir, file));
    for (const v of Object.values(mod)) {
      if (typeof v === "object" && v !== null && "lua" in v && "name" in v && typeof v.lua === "string" && typeof v.name === "string") {
        scriptsBySha.set(createHash("sha1").update(v.lua).digest("hex"), { name: v.name, lua: v.lua });
      }
    }
  }
}

/** ioredis keeps the custom commands of a connection (BullMQ's scripts) in `scriptsSet`. */
function learnConnectionScripts(conn: object): void {
  const set: unknown = Reflect.get(conn, "scriptsSet");
  if (typeof set !== "object" || set === null) return;
  for (const [name, s] of Object.entries(set)) {
    const sha: unknown = Reflect.get(s, "sha");
    const lua: unknown = Reflect.get(s, "lua");
    if (typeof sha === "string" && typeof lua === "string" && !scriptsBySha.has(sha))
      scriptsBySha.set(sha, { name: `bullmq:${name}`, lua });
  }
}

/** The first frame of the project's `src/` (not node_modules) in a stack: `src/store/users.ts UserStore.create`. */
function siteOf(stack: string | undefined): string {
  for (const line of (stack ?? "").split("\n")) {
    const m = /at (?:async )?(?:(\S+) \()?(\/[^)]*?\/src\/[^):]+)/.exec(line);
    // The first frame past the script loader (src/store/script.ts), which every script call passes,
    // and the tick-batched clients (src/app/redis-client.ts), which every command of theirs passes.
    if (m?.[2] && !m[2].includes("node_modules") && !m[2].endsWith("/src/store/script.ts") && !m[2].endsWith("/src/app/redis-client.ts"))
      return `${path.relative(ROOT, m[2])} ${m[1] ?? "<anonymous>"}`;
  }
  return "<outside src/ (BullMQ, or an auto-pipeline flush)>";
}

function argsOf(cmd: Command): (string | Buffer | number)[] {
  // The script loader (src/store/script.ts) writes its calls' frames itself and leaves `args` empty.
  if (cmd.args.length === 0 && (cmd.name === "eval" || cmd.name === "evalsha")) return respArgs(cmd.toWritable({}));
  return cmd.args.map((a) => (typeof a === "string" || typeof a === "number" || Buffer.isBuffer(a) ? a : String(a)));
}

/** The arguments of a RESP command frame (`*<n>` then `$<bytes>` bulk strings), without the command name. */
function respArgs(frame: string | Buffer): string[] {
  const buf = Buffer.isBuffer(frame) ? frame : Buffer.from(frame, "utf8");
  const line = (from: number) => {
    const end = buf.indexOf("\r\n", from);
    return { text: buf.subarray(from, end).toString("latin1"), next: end + 2 };
  };
  let at = 0;
  const count = line(at);
  if (!count.text.startsWith("*")) throw new Error(`not a RESP array: ${count.text}`);
  at = count.next;
  const parts: string[] = [];
  for (let i = 0; i < Number(count.text.slice(1)); i++) {
    const len = line(at);
    const bytes = Number(len.text.slice(1));
    parts.push(buf.subarray(len.next, len.next + bytes).toString("utf8"));
    at = len.next + bytes + 2;
  }
  return parts.slice(1);
}

/**
 * Observes every command of every ioredis `Redis` of this worker and groups them into units.
 * Returns the units so far and an uninstaller.
 */
function observeCommands(): { units: Unit[]; uninstall: () => void } {
  const units: Unit[] = [];
  const open = new WeakMap<object, { site: string; names: string[]; keys: string[]; commands: (string | Buffer | number)[][] }>();
  const original = Redis.prototype.sendCommand;
  Redis.prototype.sendCommand = function (this: Redis, ...call: Parameters<Redis["sendCommand"]>) {
    try {
      observe(this, call[0], call[1]);
    } catch {
      // observation must never change what is sent
    }
    return original.apply(this, call);
  };
  const stack = () => {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 50;
    const s = new Error().stack;
    Error.stackTraceLimit = limit;
    return s;
  };
  /** Explicit pipelines (not atomic, but ioredis's Cluster client sends one only to one node), by their per-exec stream. */
  const pipes = new WeakMap<object, { site: string; auto: boolean; names: string[]; keys: string[] } | undefined>();
  function inPipeline(stream: unknown, name: string, keys: readonly string[]): void {
    if (typeof stream !== "object" || stream === null || Reflect.get(stream, "isPipeline") !== true) return;
    let p = pipes.get(stream);
    if (!pipes.has(stream)) {
      const s = stack() ?? "";
      // ioredis's auto-pipeline flushes group commands by node themselves on a Cluster client.
      p = { site: siteOf(s), auto: s.includes("autoPipelining"), names: [], keys: [] };
      pipes.set(stream, p);
      const group = p;
      // Pipeline.exec sends its commands in one synchronous loop: the group is complete after it.
      queueMicrotask(() => {
        if (!group.auto && group.names.length > 1 && group.keys.length > 1) {
          units.push({ kind: "pipeline", name: group.names.join("+"), site: group.site, keys: group.keys, commands: [] });
        }
      });
    }
    p?.names.push(name);
    p?.keys.push(...keys);
  }
  function observe(conn: Redis, cmd: Command, stream: unknown): void {
    const name = cmd.name.toLowerCase();
    const tx = open.get(conn);
    if (name === "multi") {
      open.set(conn, { site: siteOf(stack()), names: [], keys: [], commands: [] });
      return;
    }
    if (tx && (name === "exec" || name === "discard")) {
      open.delete(conn);
      if (name === "exec") units.push({ kind: "multi", name: tx.names.join("+"), site: tx.site, keys: tx.keys, commands: tx.commands });
      return;
    }
    let commandArgs = argsOf(cmd);
    let keys = cmd.getKeys().map(String);
    let unitName = name;
    let kind: Kind = "command";
    if (name === "eval" || name === "evalsha") {
      kind = "script";
      learnConnectionScripts(conn);
      const head = String(commandArgs[0]);
      const sha = name === "eval" ? createHash("sha1").update(head).digest("hex") : head;
      let known = scriptsBySha.get(sha);
      if (!known && name === "eval") {
        known = { name: `<unnamed ${sha.slice(0, 8)}>`, lua: head };
        scriptsBySha.set(sha, known);
      }
      unitName = known?.name ?? `<evalsha ${sha.slice(0, 8)}>`;
      const numKeys = Number(commandArgs[1]);
      keys = commandArgs.slice(2, 2 + numKeys).map(String);
      if (known) commandArgs = [known.lua, ...commandArgs.slice(1)];
    }
    if (!tx) inPipeline(stream, kind === "script" ? `eval(${unitName})` : name, keys);
    if (tx) {
      tx.names.push(kind === "script" ? `eval(${unitName})` : name);
      tx.keys.push(...keys);
      tx.commands.push([kind === "script" ? "eval" : name, ...commandArgs]);
      return;
    }
    if (kind === "script" || keys.length > 1) {
      units.push({ kind, name: unitName, site: siteOf(stack()), keys, commands: [[kind === "script" ? "eval" : name, ...commandArgs]] });
    }
  }
  return {
    units,
    uninstall: () => {
      Redis.prototype.sendCommand = original;
    },
  };
}

/**
 * `<p>:{<p>}:apikeys` -> `{global}:apikeys`; a user's key in its shard,
 * `<p>:{<p>.g<i>.<n>}:u_…:source:…` -> `{shard}:source`, a shard's outbox `<p>:{<p>.g<i>.<n>}:outbox`
 * -> `{shard}:outbox`; layout 1's `<p>:{u_…}:source:…` -> `{user}:source`; BullMQ's
 * `<p>:{bull}:delivery:…` (or `{bull.<queue>}`) -> `{bull}:delivery`.
 */
function shapeOf(key: string, prefix: string): string {
  const m = /^[^:]*:\{([^}]*)\}(?::([^:]*))?(?::([^:]*))?/.exec(key.startsWith(`${prefix}:`) ? key : `?:${key}`);
  if (!m) return key;
  const tag = m[1] ?? "";
  if (tag === prefix) return `{global}:${m[2] ?? ""}`;
  if (tag === "bull" || tag.startsWith("bull.")) return `{bull}:${m[2] ?? ""}`;
  if (tag.startsWith(`${prefix}.g`)) return `{shard}:${(m[2]?.startsWith("u_") ? m[3] : m[2]) ?? ""}`;
  return `{user}:${m[2] ?? ""}`;
}

function who(u: Unit): string {
  switch (u.kind) {
    case "script":
      return `script ${u.name}`;
    case "multi":
      return `MULTI at ${u.site}`;
    case "pipeline":
      return `PIPELINE at ${u.site}`;
    default:
      return `${u.name.toUpperCase()} at ${u.site}`;
  }
}

/** The detailed identity of a unit: who issued it and the shapes of its keys. */
function signature(u: Unit, prefix: string): string {
  const shapes = [...new Set(u.keys.map((k) => shapeOf(k, prefix)))].sort();
  return `${who(u)} [${shapes.join(" ")}]`;
}

/** The allow-list identity: who issued it and the tag classes of its keys (`{global}+{user}`). */
function allowKey(u: Unit, prefix: string): string {
  const tags = [...new Set(u.keys.map((k) => shapeOf(k, prefix).split(":")[0]))].sort();
  return `${who(u)} ${tags.join("+")}`;
}

const slotsOf = (keys: readonly string[]) => new Set(keys.map((k) => keySlot(k)));

/** What the workload's units look like once grouped by signature. */
interface Finding {
  readonly signature: string;
  readonly example: Unit;
  readonly count: number;
  readonly crossSlot: boolean;
}

function findings(units: readonly Unit[], prefix: string): Finding[] {
  const out = new Map<string, { example: Unit; count: number; crossSlot: boolean }>();
  for (const u of units) {
    if (u.keys.length > 0 && !u.keys.every((k) => k.startsWith(`${prefix}:`))) continue; // another test's Redis traffic
    const sig = signature(u, prefix);
    const cross = slotsOf(u.keys).size > 1;
    const f = out.get(sig);
    if (!f) out.set(sig, { example: u, count: 1, crossSlot: cross });
    else {
      f.count++;
      if (cross && !f.crossSlot) {
        f.crossSlot = true;
        f.example = u;
      }
    }
  }
  return [...out.entries()].map(([signature, f]) => ({ signature, ...f })).sort((a, b) => a.signature.localeCompare(b.signature));
}

// ---------------------------------------------------------------------------------------------

let td: TestDaemon;
let rx: Receiver;
let observed: ReturnType<typeof observeCommands>;
let all: Finding[] = [];
/** Every unit of the workload in the order it was sent (for the replay on the cluster). */
let inOrder: Unit[] = [];

/** A component that answers its requests itself. */
const RESPONDING_ESM = `export default {
  name: "Answers", version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) { this.http.respond({ status: 200, body: "answered" }); },
};`;

/** A representative workload through the API: as many store operations as practical. */
async function workload(): Promise<void> {
  const ok = <R extends { status: number; text: string }>(res: R, what: string, ...statuses: number[]): R => {
    const want = statuses.length > 0 ? statuses : [200];
    if (!want.includes(res.status)) throw new Error(`${what}: ${res.status} ${res.text}`);
    return res;
  };
  const u = await td.createUser("paid");
  const other = await td.createUser("free");
  const api = u.api;

  // Components and sources (timer and HTTP, with an endpoint token), the source DB, slugs.
  const component = ok(await api.post("/v1/components", { json: { component_code: TIMER_CJS } }), "component").body.data;
  const timer = ok(await api.post("/v1/sources", { json: { component_id: component.id, name: "Ticks" } }), "timer source").body.data;
  ok(await api.put(`/v1/sources/${timer.id}`, { json: { component_id: component.id, active: false } }), "update source");
  const http = ok(await api.post("/v1/sources", { json: { component_code: HTTP_ESM, name: "Inbox" } }), "http source").body.data;
  const endpoint = /"(https?:\/\/[^"]*\/e\/[^"]+)"/.exec(JSON.stringify(http))?.[1];
  if (!endpoint) throw new Error(`no endpoint URL in ${JSON.stringify(http)}`);
  ok(await api.put(`/v1/sources/${http.id}`, { json: { component_code: HTTP_ESM, name: "Inbox two" } }), "update http source");
  ok(await api.get("/v1/users/me/sources"), "list sources");

  // Webhooks (one answering 200, one 500 for retries and the circuit), subscriptions, workflows.
  const good = ok(await api.post("/v1/webhooks", { json: { url: rx.url("/good"), name: "good" } }), "webhook").body.data;
  const bad = ok(await api.post("/v1/webhooks", { json: { url: rx.url("/bad"), name: "bad" } }), "webhook").body.data;
  ok(await api.put(`/v1/webhooks/${good.id}`, { json: { description: "kept" } }), "update webhook");
  ok(await api.post(`/v1/webhooks/${good.id}/secret/rotate`), "rotate secret");
  // A rate-limited webhook: its attempts take start slots (store/scripts/webhook-slot.ts).
  const paced = ok(await api.post("/v1/webhooks", { json: { url: rx.url("/paced"), name: "paced", rate_limit_per_second: 50 } }), "webhook")
    .body.data;
  const p = `p_${Date.now().toString(36)}slots`;
  ok(await api.put(`/v1/workflows/${p}`, { json: { name: "Orders" } }), "workflow");
  ok(await api.post("/v1/subscriptions", { json: { emitter_id: p, listener_id: good.id } }), "subscribe");
  ok(await api.post("/v1/subscriptions", { json: { emitter_id: p, listener_id: paced.id } }), "subscribe paced");
  ok(await api.post("/v1/subscriptions", { json: { emitter_id: p, listener_id: bad.id, event_name: "other" } }), "subscribe");
  ok(await api.post("/v1/subscriptions", { json: { emitter_id: http.id, listener_id: good.id } }), "subscribe source");
  ok(await api.post("/v1/auto_subscriptions", { json: { listener_id: good.id, event_name: "$errors" } }), "auto-subscribe");
  ok(await api.get("/v1/users/me/subscriptions"), "list subscriptions");

  // A live tail open while events arrive (SSE streams set, tail reads), and an SSE token.
  ok(await api.post(`/v1/sources/${http.id}/sse_tokens`), "sse token");
  const tail = new AbortController();
  const tailed = fetch(`${td.url}/v1/sources/${http.id}/sse`, { headers: { authorization: `Bearer ${u.api_key}` }, signal: tail.signal })
    .then(async (res) => {
      const reader = res.body?.getReader();
      let text = "";
      while (reader && !text.includes("data:")) {
        const { value, done } = await reader.read();
        if (done) break;
        text += Buffer.from(value).toString("utf8");
      }
      return text;
    })
    .catch(() => "");

  // Ingress: workflow emits (single, batch, $errors), an HTTP source request (run stream, runtime).
  ok(await api.post(`/v1/workflows/${p}/events`, { json: { event: { n: 1 } } }), "emit", 202);
  ok(await api.post(`/v1/workflows/${p}/events`, { json: { events: [{ event: 2 }, { event: 3, name: "other" }] } }), "emit batch", 202);
  const many = Array.from({ length: 12 }, (_, i) => ({ event: { many: i } }));
  ok(await api.post(`/v1/workflows/${p}/events`, { json: { events: many } }), "emit 12", 202);
  // A large payload to a webhook that fails once: stored once for its waiting delivery (payload
  // hold), released when its retry is delivered (payload release).
  const flaky = ok(await api.post("/v1/webhooks", { json: { url: rx.url("/flaky"), name: "flaky" } }), "webhook").body.data;
  ok(await api.post("/v1/subscriptions", { json: { emitter_id: p, listener_id: flaky.id, event_name: "big" } }), "subscribe");
  ok(
    await api.post(`/v1/workflows/${p}/events`, { json: { events: [{ event: { big: "x".repeat(4000) }, name: "big" }] } }),
    "emit large",
    202,
  );
  await waitFor(() => rx.to("/flaky").length >= 2, { timeoutMs: 30_000, what: "the large event's retry" });
  ok(
    await api.post(`/v1/workflows/${p}/$errors/events`, { json: { original_event: {}, error: { msg: "boom" } } }),
    "emit $errors",
    202,
    200,
  );
  const hit = await fetch(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ hello: 1 }),
  });
  await hit.text();
  await waitFor(async () => ((await api.get(`/v1/sources/${http.id}/event_summaries`)).body?.data?.length ?? 0) > 0, {
    timeoutMs: 30_000,
    what: "the HTTP source's event",
  });
  await Promise.race([tailed, new Promise((r) => setTimeout(r, 5_000))]);
  tail.abort();

  // A free user's source that answers requests itself (customResponse): the inline admit (both
  // rates in one step), the quota check, the run.
  const answers = ok(
    await other.api.post("/v1/sources", { json: { component_code: RESPONDING_ESM, name: "Answers" } }),
    "custom-response source",
  ).body.data;
  const answersAt = /"(https?:\/\/[^"]*\/e\/[^"]+)"/.exec(JSON.stringify(answers))?.[1];
  if (!answersAt) throw new Error(`no endpoint URL in ${JSON.stringify(answers)}`);
  const answered = await fetch(answersAt, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
  if ((await answered.text()) !== "answered") throw new Error(`custom response: ${answered.status}`);
  // A free user's queued request: accepted in one step, its run checks the quota again.
  const inbox = ok(await other.api.post("/v1/sources", { json: { component_code: HTTP_ESM, name: "Free inbox" } }), "free source").body
    .data;
  const queued = await fetch(inbox.configured_props.http.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: "{}",
  });
  if (queued.status !== 200) throw new Error(`queued request: ${queued.status} ${await queued.text()}`);
  await waitFor(async () => ((await other.api.get(`/v1/sources/${inbox.id}/event_summaries`)).body?.data?.length ?? 0) > 0, {
    timeoutMs: 30_000,
    what: "the free user's source's event",
  });

  // Deliveries: one delivered, one failing (retries, circuit), then listing, retry and a replay.
  await waitFor(() => rx.to("/good").length >= 14 && rx.to("/bad").length >= 1 && rx.to("/paced").length >= 1, {
    timeoutMs: 30_000,
    what: "deliveries to both webhooks",
  });
  const failed = await waitFor(
    async () => (await api.get(`/v1/webhooks/${bad.id}/deliveries`)).body?.data?.find((d: { status: string }) => d.status === "failed"),
    { timeoutMs: 30_000, what: "a failed delivery" },
  );
  ok(await api.get(`/v1/webhooks/${good.id}/deliveries`, { query: { status: "delivered", since: 0 } }), "list deliveries");
  // A bulk replay of the failed deliveries (plan, advance, settle): they fail again, and settle.
  const replay = ok(await api.post(`/v1/webhooks/${bad.id}/deliveries/replay`, { query: { since: 0 } }), "replay", 200, 202).body.data;
  await waitFor(async () => (await api.get(`/v1/webhooks/${bad.id}/replays/${replay.id}`)).body?.data?.state === "done", {
    timeoutMs: 30_000,
    what: "the replay to finish",
  });
  await waitFor(
    async () => (await api.get(`/v1/webhooks/${bad.id}/deliveries`)).body?.data?.find((d: { status: string }) => d.status === "failed"),
    { timeoutMs: 30_000, what: "the replayed delivery to fail again" },
  );
  ok(await api.post(`/v1/webhooks/${bad.id}/deliveries/${failed.id}/retry`), "retry", 200, 202, 409);
  ok(await api.get(`/v1/workflows/${p}/event_summaries`, { query: { expand: "event" } }), "summaries");
  ok(await api.get(`/v1/webhooks/${good.id}/event_summaries`), "webhook summaries");

  // Two more users whose failing webhooks open their circuits (CIRCUIT_FAILURE_THRESHOLD attempts
  // in a row), then the open-circuit gauge, read across users (CircuitStore.countOpen).
  for (const x of [await td.createUser("paid"), await td.createUser("paid")]) {
    const hook = ok(await x.api.post("/v1/webhooks", { json: { url: rx.url("/bad-circuit"), name: "tripped" } }), "webhook").body.data;
    const flow = `p_${Date.now().toString(36)}trip`;
    ok(await x.api.post("/v1/subscriptions", { json: { emitter_id: flow, listener_id: hook.id } }), "subscribe");
    ok(
      await x.api.post(`/v1/workflows/${flow}/events`, { json: { events: [{ event: 1 }, { event: 2 }, { event: 3 }, { event: 4 }] } }),
      "emit",
      202,
    );
  }
  await waitFor(
    async () => {
      const metrics = await (await fetch(`${td.url}/metrics`)).text();
      return Number(/^tributary_circuits_open (\d+)/m.exec(metrics)?.[1] ?? 0) >= 2;
    },
    { timeoutMs: 30_000, intervalMs: 200, what: "two open circuits in tributary_circuits_open" },
  );

  // Deletions and the account: events of a source, subscriptions, a webhook, sources (with a
  // token), a workflow, an API key rotation, a user.
  ok(await api.del(`/v1/sources/${http.id}/events`), "delete events", 200, 202, 204);
  ok(await api.del("/v1/subscriptions", { query: { emitter_id: p, listener_id: good.id, event_name: "" } }), "unsubscribe", 200, 202, 204);
  ok(await api.del(`/v1/webhooks/${bad.id}`), "delete webhook", 200, 202, 204);
  ok(await api.del(`/v1/sources/${timer.id}`), "delete timer source", 200, 202, 204);
  ok(await api.del(`/v1/sources/${http.id}`), "delete http source", 200, 202, 204);
  ok(await api.del(`/v1/workflows/${p}`), "delete workflow", 200, 202, 204);
  const admin = { authorization: `Bearer ${td.adminToken}` };
  const rotated = await fetch(`${td.url}/admin/users/${other.id}/api_key`, { method: "POST", headers: admin });
  ok({ status: rotated.status, text: await rotated.text() }, "rotate key", 200, 201);
  const deleted = await fetch(`${td.url}/admin/users/${other.id}`, { method: "DELETE", headers: admin });
  ok({ status: deleted.status, text: await deleted.text() }, "delete user", 200, 202, 204);
}

beforeAll(async () => {
  await loadOurScripts();
  rx = await startReceiver((req) => ({
    status: req.path.startsWith("/bad") || (req.path === "/flaky" && req.nthOnPath === 1) ? 500 : 200,
  }));
  observed = observeCommands();
  // DELIVERY_LOG_LIMIT at its minimum, so that tribCreateDelivery's trim branch (MGET/DEL of keys
  // it builds from ARGV) runs.
  td = await startTestDaemon({ DELIVERY_RETRY_SCHEDULE: "100ms,100ms", DELIVERY_LOG_LIMIT: "10" });
  await workload();
  // The shutdown's commands count too (the scheduler lock is released then).
  await td.daemon.close();
  observed.uninstall();
  all = findings(observed.units, td.prefix);
  inOrder = observed.units.filter((u) => u.keys.every((k) => k.startsWith(`${td.prefix}:`)));
}, 120_000);

afterAll(async () => {
  observed?.uninstall();
  if (td) {
    const redis = connectRedis();
    await dropPrefix(redis, td.prefix);
    redis.disconnect();
  }
  await rx?.close();
});

describe("hash-slot lint (SPEC §8)", () => {
  it("every script, MULTI and multi-key command of the workload touches one hash slot, known violations aside", () => {
    // The workload really exercised the store: scripts, transactions and multi-key commands.
    expect(all.filter((f) => f.example.kind === "script").length).toBeGreaterThan(10);
    expect(all.filter((f) => f.example.kind === "multi").length).toBeGreaterThan(5);
    const crossSlot = all.filter((f) => f.crossSlot);
    const ours = [...new Set([...scriptsBySha.values()].map((x) => x.name).filter((n) => !n.startsWith("bullmq:")))];
    const exercised = new Set(all.map((f) => f.example.name));
    // Every script of src/store/scripts/ ran (a new script must join the workload).
    expect(ours.length).toBeGreaterThan(20);
    expect(ours.filter((n) => !exercised.has(n))).toEqual([]);
    const report = crossSlot.map((f) => `${f.signature}\n    at ${f.example.site}\n    keys ${f.example.keys.join(" ")}`);
    console.info(`hash-slot lint: ${all.length} kinds of atomic unit, ${crossSlot.length} cross-slot:\n${report.join("\n")}`);
    // No new cross-slot unit...
    expect(crossSlot.filter((f) => !(allowKey(f.example, td.prefix) in KNOWN_CROSS_SLOT)).map((f) => f.signature)).toEqual([]);
    // ...and no stale allow-list entry (a fixed violation must leave the list).
    const seen = new Set(crossSlot.map((f) => allowKey(f.example, td.prefix)));
    expect(Object.keys(KNOWN_CROSS_SLOT).filter((k) => !seen.has(k))).toEqual([]);
  });
});

/** XREAD/XREADGROUP without BLOCK: the replay must not wait (the slot check comes before blocking anyway). */
function withoutBlock(command: readonly (string | Buffer | number)[]): (string | Buffer | number)[] {
  const out = [...command];
  const i = out.findIndex((a) => typeof a === "string" && a.toUpperCase() === "BLOCK");
  if (i > 0) out.splice(i, 2);
  return out;
}

/**
 * Redis Cluster's refusals of a unit for its slots: CROSSSLOT; MOVED for a command queued in a
 * MULTI whose key lives on another node than the first (the transaction spans nodes, so slots);
 * a script touching an undeclared key of another slot or node.
 */
const SLOT_REFUSAL = /CROSSSLOT|MOVED \d+|do not hash to the same slot|non local key/i;

function errorText(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const previous: unknown = Reflect.get(err, "previousErrors");
  const more = Array.isArray(previous) ? previous.map((e: unknown) => (e instanceof Error ? e.message : String(e))) : [];
  return [err.message, ...more].join(" | ");
}

describe("on a real 3-master Redis Cluster", () => {
  let cluster: LocalCluster | undefined;
  const conns = new Map<number, Redis>();
  beforeAll(async () => {
    cluster = await startCluster({ masters: 3 });
  }, 60_000);
  afterAll(async () => {
    for (const c of conns.values()) c.disconnect();
    await cluster?.stop();
  });

  it("replaying every unit in order on the node of its slot: Redis refuses exactly the known cross-slot ones", async () => {
    const c = cluster;
    if (!c) throw new Error("no cluster");
    const on = (port: number) => {
      let r = conns.get(port);
      if (!r) {
        r = new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 0, commandTimeout: 5000 });
        r.on("error", () => {});
        conns.set(port, r);
      }
      return r;
    };
    const refused = new Map<string, string>();
    const unreplayable: string[] = [];
    const mgetCalls = async (r: Redis) => Number(/cmdstat_mget:calls=(\d+)/.exec(await r.info("commandstats"))?.[1] ?? 0);
    let trimReads = 0;
    // Every unit in the order the workload sent it, so that scripts find the state earlier units
    // left (a webhook record before its deliveries) and take the same branches as on one Redis.
    for (const u of inOrder) {
      if (u.kind === "pipeline") continue; // not atomic: Redis checks each command alone
      const sig = signature(u, td.prefix);
      const first = u.keys[0];
      const node = first === undefined ? c.nodes[0] : c.nodeForSlot(keySlot(first));
      if (!node) throw new Error("no node");
      const r = on(node.port);
      const [head, ...rest] = u.commands.map(withoutBlock);
      if (!head) continue;
      let text = "";
      const mgetsBefore = u.name === "tribCreateDelivery" ? await mgetCalls(r) : 0;
      try {
        if (u.kind === "multi")
          await r.multi(u.commands.map((cmd) => withoutBlock(cmd).map((a) => (typeof a === "number" ? String(a) : a)))).exec();
        else await r.call(String(head[0]), ...head.slice(1));
      } catch (err) {
        text = errorText(err);
      }
      if (u.name === "tribCreateDelivery") trimReads += (await mgetCalls(r)) - mgetsBefore;
      if (rest.length > 0 && u.kind !== "multi") throw new Error("a non-MULTI unit has one command");
      if (/NOSCRIPT/.test(text)) unreplayable.push(sig);
      if (SLOT_REFUSAL.test(text)) refused.set(sig, text);
    }
    const report = [...refused].map(([sig, err]) => `${sig}\n    ${err}`);
    console.info(`cluster replay: ${inOrder.length} units, ${refused.size} kinds refused for their slots:\n${report.join("\n")}`);
    expect(unreplayable).toEqual([]);
    // The trim branch of tribCreateDelivery ran on the cluster: its MGET of keys built from ARGV
    // was accepted (they are in the user's slot).
    expect(trimReads).toBeGreaterThan(0);
    // Every unit the client-side lint flags is really refused by Redis Cluster (the lint is right)...
    // (Pipelines are not atomic: Redis checks each of their commands alone, so they are not replayed.)
    expect(all.filter((f) => f.crossSlot && f.example.kind !== "pipeline" && !refused.has(f.signature)).map((f) => f.signature)).toEqual(
      [],
    );
    // ...and Redis refuses nothing else that is not known: no script reaches an undeclared key of another slot.
    const byAllowKey = new Map(all.map((f) => [f.signature, allowKey(f.example, td.prefix)]));
    expect([...refused.keys()].filter((sig) => !((byAllowKey.get(sig) ?? sig) in KNOWN_CROSS_SLOT))).toEqual([]);
  });
});
