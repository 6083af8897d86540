import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeys } from "../../../src/store/keys.js";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";
import { connectRedis } from "../../helpers/redis.js";
import { type Json, expectStatus, events } from "./support.js";

/**
 * Source lifecycle hooks and source listeners through the whole daemon (SPEC §5 "Hooks",
 * "Listeners"). Hooks report themselves to a loopback receiver with `fetch` (test daemons allow
 * private destinations), which also shows the hooks a deleted source ran.
 */

/**
 * Every hook emits, counts itself in db and calls `hookUrl`; run() emits the db it sees. This is
 * the shape of Pipedream's webhook sources (register in activate, unregister in deactivate).
 */
const HOOKED = `module.exports = {
  key: "rt-hooked",
  name: "Runtime Hooked",
  version: "0.0.1",
  props: {
    db: "$.service.db",
    http: "$.interface.http",
    hookUrl: { type: "string", label: "Where hooks report" },
  },
  methods: {
    async report(hook) {
      const calls = (this.db.get("calls") || []).concat(hook);
      this.db.set("calls", calls);
      this.$emit({ hook, calls }, { summary: hook });
      await fetch(this.hookUrl + "?hook=" + hook + "&source=" + process.env.PD_COMPONENT);
    },
  },
  hooks: {
    async deploy() { await this.report("deploy"); },
    async activate() { await this.report("activate"); },
    async deactivate() { await this.report("deactivate"); },
  },
  async run(event) {
    this.$emit({ hook: "run", calls: this.db.get("calls") }, { summary: "run" });
  },
};
`;

const failingHook = (hook: string) => `module.exports = {
  name: "Runtime Failing ${hook}",
  version: "0.0.1",
  props: { db: "$.service.db", http: "$.interface.http" },
  hooks: {
    async ${hook}() {
      this.db.set("touched", true);
      this.$emit({ from: "${hook}" });
      throw new Error("cannot register the webhook");
    },
  },
  async run() {},
};
`;

/** Emits what it was given, as a Pipedream source listening to another emitter would. */
const RELAY = `module.exports = {
  name: "Runtime Relay",
  version: "0.0.1",
  props: {},
  async run(event) {
    this.$emit({ relayed: event });
  },
};
`;

/** Passes an event on with its hop count raised; two of these subscribed to each other loop. */
const BOUNCER = `module.exports = {
  name: "Runtime Bouncer",
  version: "0.0.1",
  props: {},
  async run(event) {
    this.$emit({ hop: (event.hop || 0) + 1, by: process.env.PD_COMPONENT });
  },
};
`;

let td: TestDaemon;
let rx: Receiver;
let redis: Redis;

beforeAll(async () => {
  td = await startTestDaemon();
  rx = await startReceiver();
  redis = connectRedis();
});

afterAll(async () => {
  await rx?.close();
  redis?.disconnect();
  await td?.close();
});

async function atLeast(api: Client, sourceId: string, n: number, eventName?: string): Promise<Json[]> {
  return waitFor(
    async () => {
      const d = await events(api, sourceId, eventName);
      return d.length >= n ? d : undefined;
    },
    { what: `${n} event(s) on ${eventName ?? "the default channel"} of ${sourceId}` },
  );
}

/** Hooks the receiver heard from one source, in order. */
function hooksOf(path: string, sourceId: string): string[] {
  return rx
    .to(path)
    .map((r) => new URL(r.path, "http://x").searchParams)
    .filter((p) => p.get("source") === sourceId)
    .map((p) => p.get("hook") ?? "");
}

async function subscribe(api: Client, emitter_id: string, listener_id: string): Promise<void> {
  expectStatus(await api.post("/v1/subscriptions", { query: { emitter_id, listener_id } }), 200);
}

const uniquePath = () => `/hooks/${Math.random().toString(36).slice(2)}`;

describe("hooks", () => {
  it("runs deploy then activate on create; what they emit and store is there afterwards", async () => {
    const u = await td.createUser();
    const path = uniquePath();
    const res = await u.api.post("/v1/sources", { json: { component_code: HOOKED, configured_props: { hookUrl: rx.url(path) } } });
    expectStatus(res, 200);
    const s = res.body.data;
    // The hooks finished before the answer: both calls have arrived.
    expect(hooksOf(path, s.id)).toEqual(["deploy", "activate"]);
    const emitted = await atLeast(u.api, s.id, 2);
    expect(emitted.map((e) => e.event)).toEqual([
      { hook: "deploy", calls: ["deploy"] },
      { hook: "activate", calls: ["deploy", "activate"] },
    ]);

    // A run sees the db state the hooks left.
    expectStatus(await client(td.url).post(s.configured_props.http.endpoint_url, { json: {} }), 200);
    const after = await atLeast(u.api, s.id, 3);
    expect(after[2].event).toEqual({ hook: "run", calls: ["deploy", "activate"] });
  });

  it("runs deactivate then activate on update, deactivate alone on disable, activate alone on enable", async () => {
    const u = await td.createUser();
    const path = uniquePath();
    const created = await u.api.post("/v1/sources", { json: { component_code: HOOKED, configured_props: { hookUrl: rx.url(path) } } });
    expectStatus(created, 200);
    const s = created.body.data;
    const put = (json: Record<string, unknown>) => u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id, ...json } });

    expectStatus(await put({ name: "renamed" }), 200);
    expect(hooksOf(path, s.id)).toEqual(["deploy", "activate", "deactivate", "activate"]);
    expectStatus(await put({ active: false }), 200);
    expect(hooksOf(path, s.id)).toEqual(["deploy", "activate", "deactivate", "activate", "deactivate"]);
    expectStatus(await put({ active: true }), 200);
    expect(hooksOf(path, s.id)).toEqual(["deploy", "activate", "deactivate", "activate", "deactivate", "activate"]);

    const emitted = await atLeast(u.api, s.id, 6);
    expect(emitted.map((e) => e.event.hook)).toEqual(["deploy", "activate", "deactivate", "activate", "deactivate", "activate"]);
  });

  // Pipedream runs each hook as its own invocation with db saved in between, so activate sees
  // what deactivate stored (a webhook source clears its hook id in deactivate and registers a
  // new one in activate when none is stored). Here both hooks of an update start from the state
  // saved before the update, and activate's save overwrites deactivate's (see the report).
  it("lets activate see what deactivate stored during the same update", async () => {
    const u = await td.createUser();
    const path = uniquePath();
    const created = await u.api.post("/v1/sources", { json: { component_code: HOOKED, configured_props: { hookUrl: rx.url(path) } } });
    expectStatus(created, 200);
    const s = created.body.data;
    expectStatus(await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id, name: "again" } }), 200);
    const emitted = await atLeast(u.api, s.id, 4);
    expect(emitted[2].event).toEqual({ hook: "deactivate", calls: ["deploy", "activate", "deactivate"] });
    expect(emitted[3].event).toEqual({ hook: "activate", calls: ["deploy", "activate", "deactivate", "activate"] });
  });

  it("runs deactivate on delete, and not for a source that is already inactive", async () => {
    const u = await td.createUser();
    const path = uniquePath();
    const mk = async () => {
      const res = await u.api.post("/v1/sources", { json: { component_code: HOOKED, configured_props: { hookUrl: rx.url(path) } } });
      expectStatus(res, 200);
      return res.body.data;
    };
    const active = await mk();
    expectStatus(await u.api.del(`/v1/sources/${active.id}`), 204);
    expect(hooksOf(path, active.id)).toEqual(["deploy", "activate", "deactivate"]);

    const inactive = await mk();
    expectStatus(await u.api.put(`/v1/sources/${inactive.id}`, { json: { component_id: inactive.component_id, active: false } }), 200);
    expectStatus(await u.api.del(`/v1/sources/${inactive.id}`), 204);
    expect(hooksOf(path, inactive.id)).toEqual(["deploy", "activate", "deactivate"]);
  });

  it("answers 400 hook_failed when deploy or activate throws, and leaves no source, endpoint or state behind", async () => {
    const u = await td.createUser();
    const keys = createKeys(td.prefix);
    const endpointsBefore = await redis.hlen(keys.endpoints());
    for (const hook of ["deploy", "activate"]) {
      const res = await u.api.post("/v1/sources", { json: { component_code: failingHook(hook) } });
      expectStatus(res, 400);
      expect(res.body.code).toBe("hook_failed");
      expect(res.body.error).toContain(`${hook} hook failed`);
      expect(res.body.error).toContain("cannot register the webhook");
    }
    const list = await u.api.get("/v1/users/me/sources");
    expectStatus(list, 200);
    expect(list.body.data).toEqual([]);
    expect(await redis.hlen(keys.endpoints())).toBe(endpointsBefore);
    // Neither the record, db state nor events of a source that was never saved.
    const userKeys = await redis.keys(`${createKeys(td.prefix).userKeyBase(u.id)}:*`);
    expect(userKeys).toContain(keys.user(u.id));
    expect(userKeys.filter((k) => /:(source|db|dedupe|events):/.test(k))).toEqual([]);
  });

  it("answers 400 when activate fails on update and keeps the source as it was", async () => {
    const u = await td.createUser();
    const good = await u.api.post("/v1/sources", { json: { component_code: RELAY, name: "stays" } });
    expectStatus(good, 200);
    const s = good.body.data;
    const res = await u.api.put(`/v1/sources/${s.id}`, { json: { component_code: failingHook("activate"), name: "changed" } });
    expectStatus(res, 400);
    expect(res.body.code).toBe("hook_failed");
    const list = await u.api.get("/v1/users/me/sources");
    expect(list.body.data).toHaveLength(1);
    expect(list.body.data[0]).toMatchObject({ id: s.id, name: "stays", component_id: s.component_id, active: true });
  });
});

describe("source listeners", () => {
  it("runs a source's run(event) for each event delivered to it from a workflow or another source", async () => {
    const u = await td.createUser();
    const relayRes = await u.api.post("/v1/sources", { json: { component_code: RELAY } });
    expectStatus(relayRes, 200);
    const relay = relayRes.body.data;
    const workflow = `p_${Math.random().toString(36).slice(2, 10)}`;
    await subscribe(u.api, workflow, relay.id);
    const emitted = await u.api.post(`/v1/workflows/${workflow}/events`, { json: { event: { hello: "relay" } } });
    expectStatus(emitted, 202);
    const [fromWorkflow] = await atLeast(u.api, relay.id, 1);
    // The listener gets the event itself, not the {raw_event} wrapper of the summaries.
    expect(fromWorkflow.event).toEqual({ relayed: { hello: "relay" } });

    const httpRes = await u.api.post("/v1/sources", {
      json: { component_code: HOOKED, configured_props: { hookUrl: rx.url(uniquePath()) } },
    });
    expectStatus(httpRes, 200);
    const http = httpRes.body.data;
    await subscribe(u.api, http.id, relay.id);
    expectStatus(await client(td.url).post(http.configured_props.http.endpoint_url, { json: {} }), 200);
    const relayed = await atLeast(u.api, relay.id, 2);
    expect(relayed[1].event).toEqual({ relayed: { hook: "run", calls: ["deploy", "activate"] } });
  });

  it("stops a chain of sources subscribed to each other after 16 hops and records it on $errors", async () => {
    const u = await td.createUser();
    const mk = async () => {
      const res = await u.api.post("/v1/sources", { json: { component_code: BOUNCER } });
      expectStatus(res, 200);
      return res.body.data;
    };
    const a = await mk();
    const b = await mk();
    await subscribe(u.api, a.id, b.id);
    await subscribe(u.api, b.id, a.id);
    const workflow = `p_${Math.random().toString(36).slice(2, 10)}`;
    await subscribe(u.api, workflow, a.id);
    expectStatus(await u.api.post(`/v1/workflows/${workflow}/events`, { json: { event: { hop: 0 } } }), 202);

    // a runs at hops 0, 2, ... 16; b at 1, 3, ... 15; the 17th hop (to b) is refused.
    const [err] = await atLeast(u.api, b.id, 1, "$errors");
    expect(err.event.error.code).toBe("MAX_HOPS");
    expect(err.event.error.msg).toMatch(/16 hops/);
    expect(err.event.original_event).toEqual({ hop: 17, by: a.id });
    expect(err.event.original_context.emitter_id).toBe(b.id);

    const fromA = await events(u.api, a.id);
    const fromB = await events(u.api, b.id);
    expect(fromA.map((e) => e.event.hop)).toEqual([1, 3, 5, 7, 9, 11, 13, 15, 17]);
    expect(fromB.map((e) => e.event.hop)).toEqual([2, 4, 6, 8, 10, 12, 14, 16]);
    expect(await events(u.api, a.id, "$errors")).toEqual([]);
  });
});
