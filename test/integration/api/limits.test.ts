import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Client, Reply, TestDaemon } from "../../helpers/daemon.js";
import { client, startTestDaemon } from "../../helpers/daemon.js";
import { connectRedis } from "../../helpers/redis.js";
import { createKeys } from "../../../src/store/keys.js";
import {
  createComponent,
  createSource,
  createWebhook,
  emit,
  expectError,
  expectLimit,
  expectStatus,
  HTTP_ESM,
  type Json,
  subscribe,
  uniqueComponent,
  usage,
  workflowId,
} from "./support.js";

/**
 * Per-user limits (docs/security.md): counts of workflows, sources, components, webhooks,
 * subscriptions and auto-subscriptions, the bytes of stored components, the listeners one emitter's
 * event may reach, and the ingress rate. One daemon with small limits; every test has its own user.
 */

const LIMITS = {
  MAX_WORKFLOWS_PER_USER: 16,
  MAX_SOURCES_PER_USER: 3,
  MAX_COMPONENTS_PER_USER: 3,
  MAX_WEBHOOKS_PER_USER: 3,
  MAX_SUBSCRIPTIONS_PER_USER: 6,
  MAX_AUTO_SUBSCRIPTIONS_PER_USER: 2,
  MAX_COMPONENT_BYTES_PER_USER: 20_000,
  MAX_LISTENERS_PER_EMITTER: 3,
  INGRESS_EVENTS_PER_SECOND_PER_USER: 1,
  INGRESS_BURST_EVENTS_PER_USER: 50,
};

let td: TestDaemon;

beforeAll(async () => {
  td = await startTestDaemon(Object.fromEntries(Object.entries(LIMITS).map(([k, v]) => [k, String(v)])));
});

afterAll(async () => {
  await td?.close();
});

const tag = () => randomBytes(4).toString("hex");
const putWorkflow = (api: Client, id = workflowId()) => api.put(`/v1/workflows/${id}`, { json: { name: id } });
const postWebhook = (api: Client) => api.post("/v1/webhooks", { query: { url: `https://example.com/${tag()}` } });

/** Fires `n` creates at once; returns the statuses. */
async function race(n: number, create: (i: number) => Promise<Reply>): Promise<Reply[]> {
  return Promise.all(Array.from({ length: n }, (_, i) => create(i)));
}

/** Exactly one of the raced creates won; every other one is the limit's 429. */
function expectOneWinner(replies: Reply[], name: string): void {
  expect(replies.map((r) => r.status).sort()).toEqual([200, ...Array(replies.length - 1).fill(429)]);
  for (const r of replies.filter((x) => x.status === 429)) expectLimit(r, name);
}

describe("webhooks limit", () => {
  it("refuses the N+1-th webhook with 429 limit_exceeded, and a deletion frees a slot", async () => {
    const u = await td.createUser();
    const made = [];
    for (let i = 0; i < LIMITS.MAX_WEBHOOKS_PER_USER; i++) made.push(await createWebhook(u.api, `https://example.com/${i}`));
    const refused = await postWebhook(u.api);
    expectLimit(refused, "webhooks");
    expect(refused.body.error).toContain(`this user has 3 webhooks, at most 3 are allowed`);
    expect((await u.api.get("/v1/users/me/webhooks")).body.page_info.total_count).toBe(3);

    expect((await u.api.del(`/v1/webhooks/${made[0].id}`)).status).toBe(204);
    expectStatus(await postWebhook(u.api), 200);
    expectLimit(await postWebhook(u.api), "webhooks");
  });

  it("lets exactly one of 10 concurrent creates at limit-1 through", async () => {
    const u = await td.createUser();
    for (let i = 0; i < LIMITS.MAX_WEBHOOKS_PER_USER - 1; i++) await createWebhook(u.api, `https://example.com/${i}`);
    expectOneWinner(await race(10, () => postWebhook(u.api)), "webhooks");
    expect((await usage(u.api)).webhooks).toEqual({ limit: 3, used: 3 });
  });

  it("counts each user separately", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    for (let i = 0; i < LIMITS.MAX_WEBHOOKS_PER_USER; i++) await createWebhook(a.api, `https://example.com/${i}`);
    expectLimit(await postWebhook(a.api), "webhooks");
    expectStatus(await postWebhook(b.api), 200);
  });
});

describe("workflows limit", () => {
  it("refuses a new workflow past the limit by PUT, emit and subscription alike; a deletion frees a slot", async () => {
    const u = await td.createUser();
    const ids: string[] = [];
    for (let i = 0; i < LIMITS.MAX_WORKFLOWS_PER_USER; i++) {
      const id = workflowId();
      ids.push(id);
      expectStatus(await putWorkflow(u.api, id), 200);
    }
    const fresh = workflowId();
    expectLimit(await putWorkflow(u.api, fresh), "workflows");
    expectLimit(await u.api.post(`/v1/workflows/${fresh}/events`, { json: { event: 1 } }), "workflows");
    const hook = await createWebhook(u.api, "https://example.com/wf");
    expectLimit(await u.api.post("/v1/subscriptions", { query: { emitter_id: fresh, listener_id: hook.id } }), "workflows");
    expectError(await u.api.get(`/v1/workflows/${fresh}`), 404);
    // Known workflows go on working at the limit.
    await emit(u.api, ids[0] as string, { ok: true });
    expectStatus(await putWorkflow(u.api, ids[1]), 200);

    expect((await u.api.del(`/v1/workflows/${ids[0]}`)).status).toBe(204);
    await emit(u.api, fresh, { now: "registered" });
    expectStatus(await u.api.get(`/v1/workflows/${fresh}`), 200);
  });

  it("lets exactly one of 10 concurrent new workflows at limit-1 through", async () => {
    const u = await td.createUser();
    for (let i = 0; i < LIMITS.MAX_WORKFLOWS_PER_USER - 1; i++) expectStatus(await putWorkflow(u.api), 200);
    expectOneWinner(await race(10, () => putWorkflow(u.api)), "workflows");
    expect((await u.api.get("/v1/users/me/workflows")).body.page_info.total_count).toBe(LIMITS.MAX_WORKFLOWS_PER_USER);
  });
});

describe("sources limit", () => {
  it("refuses the N+1-th source with 429 and leaves nothing of it; a deletion frees a slot", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, uniqueComponent());
    const made = [];
    for (let i = 0; i < LIMITS.MAX_SOURCES_PER_USER; i++) made.push(await createSource(u.api, { component_id: c.id, name: `s${i}` }));
    expectLimit(await u.api.post("/v1/sources", { json: { component_id: c.id, name: "over" } }), "sources");
    const list = (await u.api.get("/v1/users/me/sources")).body;
    expect(list.page_info.total_count).toBe(3);
    expect(list.data.map((s: Json) => s.name)).not.toContain("over");

    expect((await u.api.del(`/v1/sources/${made[0].id}`)).status).toBe(204);
    expect((await createSource(u.api, { component_id: c.id, name: "over" })).name_slug).toBe("over");
  });

  it("lets exactly one of 10 concurrent creates at limit-1 through", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, uniqueComponent());
    for (let i = 0; i < LIMITS.MAX_SOURCES_PER_USER - 1; i++) await createSource(u.api, { component_id: c.id });
    expectOneWinner(await race(10, (i) => u.api.post("/v1/sources", { json: { component_id: c.id, name: `r${i}` } })), "sources");
    expect((await usage(u.api)).sources).toEqual({ limit: 3, used: 3 });
    // Losers released the slugs they had claimed: the names are free again.
    const redis = connectRedis();
    try {
      expect(await redis.hlen(createKeys(td.prefix).sourceSlugs(u.id))).toBe(3);
    } finally {
      redis.disconnect();
    }
  });
});

describe("components limits", () => {
  it("refuses the N+1-th new component with 429 and still returns an existing one (same code) at the limit", async () => {
    const u = await td.createUser();
    const codes = Array.from({ length: LIMITS.MAX_COMPONENTS_PER_USER }, () => uniqueComponent());
    const made = [];
    for (const code of codes) made.push(await createComponent(u.api, code));
    expectLimit(await u.api.post("/v1/components", { json: { component_code: uniqueComponent() } }), "components");
    // A source naming new code makes a component too: refused the same way.
    expectLimit(await u.api.post("/v1/sources", { json: { component_code: uniqueComponent() } }), "components");
    expect((await createComponent(u.api, codes[0] as string)).id).toBe(made[0].id);
  });

  it("lets exactly one of 10 concurrent creates at limit-1 through", async () => {
    const u = await td.createUser();
    for (let i = 0; i < LIMITS.MAX_COMPONENTS_PER_USER - 1; i++) await createComponent(u.api, uniqueComponent());
    const codes = Array.from({ length: 10 }, () => uniqueComponent());
    expectOneWinner(await race(10, (i) => u.api.post("/v1/components", { json: { component_code: codes[i] } })), "components");
    expect((await usage(u.api)).components).toEqual({ limit: 3, used: 3 });
  });

  it("limits the bytes a user's components store: 429 when they add up past it, 413 for one that alone is over", async () => {
    const u = await td.createUser();
    const padded = (n: number) => `${uniqueComponent()}module.exports.pad = ${JSON.stringify("x".repeat(n))};\n`;
    await createComponent(u.api, padded(4000));
    await createComponent(u.api, padded(4000));
    const used = (await usage(u.api)).component_bytes;
    expect(used.limit).toBe(20_000);
    // What the user sees is what Redis holds: each record plus its compiled bundle.
    const redis = connectRedis();
    try {
      const keys = createKeys(td.prefix);
      const ids = await redis.zrange(keys.components(u.id), 0, -1);
      let stored = 0;
      for (const id of ids)
        stored += (await redis.strlen(keys.component(u.id, id))) + (await redis.strlen(keys.componentCompiled(u.id, id)));
      expect(used.used).toBe(stored);
      expect(stored).toBeGreaterThan(16_000);
    } finally {
      redis.disconnect();
    }
    const over = await u.api.post("/v1/components", { json: { component_code: padded(4000) } });
    expectLimit(over, "component_bytes");
    const huge = await u.api.post("/v1/components", { json: { component_code: padded(25_000) } });
    expectError(huge, 413, /component_bytes limit/);
    expect((await usage(u.api)).components.used).toBe(2);
  });
});

describe("subscriptions limit", () => {
  it("refuses the N+1-th subscription with 429, answers an existing triple at the limit, and a deletion frees a slot", async () => {
    const u = await td.createUser();
    const hook = await createWebhook(u.api, "https://example.com/subs");
    const p = workflowId();
    const made = [];
    for (let i = 0; i < LIMITS.MAX_SUBSCRIPTIONS_PER_USER; i++) made.push(await subscribe(u.api, p, hook.id, `c${i}`));
    expectLimit(
      await u.api.post("/v1/subscriptions", { query: { emitter_id: p, listener_id: hook.id, event_name: "over" } }),
      "subscriptions",
    );
    expect((await subscribe(u.api, p, hook.id, "c0")).id).toBe(made[0].id);

    const del = await u.api.del("/v1/subscriptions", { query: { emitter_id: p, listener_id: hook.id, event_name: "c0" } });
    expect(del.status).toBe(204);
    await subscribe(u.api, p, hook.id, "over");
    expect((await usage(u.api)).subscriptions).toEqual({ limit: 6, used: 6 });
  });

  it("lets exactly one of 10 concurrent creates at limit-1 through", async () => {
    const u = await td.createUser();
    const hook = await createWebhook(u.api, "https://example.com/subs-race");
    const p = workflowId();
    for (let i = 0; i < LIMITS.MAX_SUBSCRIPTIONS_PER_USER - 1; i++) await subscribe(u.api, p, hook.id, `c${i}`);
    const replies = await race(10, (i) =>
      u.api.post("/v1/subscriptions", { query: { emitter_id: p, listener_id: hook.id, event_name: `r${i}` } }),
    );
    expectOneWinner(replies, "subscriptions");
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toHaveLength(LIMITS.MAX_SUBSCRIPTIONS_PER_USER);
  });
});

describe("listeners per emitter", () => {
  it("caps the subscriptions one event of an emitter matches, counting the glob, per channel", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const hooks = [];
    for (let i = 0; i < 3; i++) hooks.push(await createWebhook(u.api, `https://example.com/l${i}`));
    await subscribe(u.api, "p_*", hooks[0].id);
    await subscribe(u.api, p, hooks[1].id);
    await subscribe(u.api, p, hooks[2].id, "default");
    const listeners = [workflowId(), workflowId()];
    const refused = await u.api.post("/v1/subscriptions", { query: { emitter_id: p, listener_id: listeners[0] } });
    expectLimit(refused, "listeners_per_emitter");
    expect(refused.body.error).toContain(`an event of ${p} on channel "default" already reaches 3 subscriptions`);
    // The glob is capped as an emitter of its own.
    await subscribe(u.api, "p_*", hooks[1].id);
    await subscribe(u.api, "p_*", hooks[2].id);
    expectLimit(
      await u.api.post("/v1/subscriptions", { query: { emitter_id: "p_*", listener_id: listeners[1] } }),
      "listeners_per_emitter",
    );
    // Another channel of the same emitter has room; an existing triple is answered at the cap.
    await subscribe(u.api, p, listeners[0] as string, "other");
    await subscribe(u.api, p, hooks[1].id);
  });

  it("lets exactly one of 10 concurrent new listeners through at the cap minus one", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const listeners = Array.from({ length: 12 }, () => workflowId());
    // Registered first, so that only the listener cap is raced.
    for (const id of [p, ...listeners]) expectStatus(await putWorkflow(u.api, id), 200);
    await subscribe(u.api, p, listeners[10] as string);
    await subscribe(u.api, p, listeners[11] as string);
    const replies = await race(10, (i) => u.api.post("/v1/subscriptions", { query: { emitter_id: p, listener_id: listeners[i] } }));
    expectOneWinner(replies, "listeners_per_emitter");
  });
});

describe("auto-subscriptions limit", () => {
  it("refuses the N+1-th with 429, answers an existing one at the limit, and deleting its listener frees the slots", async () => {
    const u = await td.createUser();
    const hook = await createWebhook(u.api, "https://example.com/auto");
    const first = await u.api.post("/v1/auto_subscriptions", { query: { listener_id: hook.id, event_name: "a" } });
    expectStatus(first, 200);
    expectStatus(await u.api.post("/v1/auto_subscriptions", { query: { listener_id: hook.id, event_name: "b" } }), 200);
    expectLimit(await u.api.post("/v1/auto_subscriptions", { query: { listener_id: hook.id, event_name: "c" } }), "auto_subscriptions");
    const again = await u.api.post("/v1/auto_subscriptions", { query: { listener_id: hook.id, event_name: "a" } });
    expect(again.body.data.id).toBe(first.body.data.id);
    expect((await u.api.del(`/v1/webhooks/${hook.id}`)).status).toBe(204);
    const other = await createWebhook(u.api, "https://example.com/auto2");
    expectStatus(await u.api.post("/v1/auto_subscriptions", { query: { listener_id: other.id, event_name: "c" } }), 200);
    expect((await usage(u.api)).auto_subscriptions).toEqual({ limit: 2, used: 1 });
  });

  it("lets exactly one of 10 concurrent creates at limit-1 through", async () => {
    const u = await td.createUser();
    const hook = await createWebhook(u.api, "https://example.com/auto-race");
    expectStatus(await u.api.post("/v1/auto_subscriptions", { query: { listener_id: hook.id, event_name: "first" } }), 200);
    const replies = await race(10, (i) => u.api.post("/v1/auto_subscriptions", { query: { listener_id: hook.id, event_name: `r${i}` } }));
    expectOneWinner(replies, "auto_subscriptions");
  });

  it("fails a new emitter whose auto-subscriptions would pass the subscriptions limit, leaving nothing of it", async () => {
    const u = await td.createUser();
    const hook = await createWebhook(u.api, "https://example.com/auto-apply");
    for (const event_name of ["x", "y"]) {
      expectStatus(await u.api.post("/v1/auto_subscriptions", { query: { listener_id: hook.id, event_name } }), 200);
    }
    // Each new emitter gets two subscriptions: three fill the limit of six.
    for (let i = 0; i < 3; i++) await emit(u.api, workflowId(), { i });
    const p = workflowId();
    expectLimit(await u.api.post(`/v1/workflows/${p}/events`, { json: { event: 1 } }), "subscriptions");
    expectError(await u.api.get(`/v1/workflows/${p}`), 404);
    const c = await createComponent(u.api, uniqueComponent());
    expectLimit(await u.api.post("/v1/sources", { json: { component_id: c.id } }), "subscriptions");
    const after = await usage(u.api);
    expect(after.subscriptions.used).toBe(6);
    expect(after.sources.used).toBe(0);
    expect(after.workflows.used).toBe(3);
  });
});

describe("ingress rate", () => {
  it("answers 429 with Retry-After past the user's rate, counting every event of a batch, and records nothing of it", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const batch = (n: number) => ({ events: Array.from({ length: n }, (_, i) => ({ event: { i } })) });
    expectStatus(await u.api.post(`/v1/workflows/${p}/events`, { json: batch(LIMITS.INGRESS_BURST_EVENTS_PER_USER) }), 202);
    // 50 more events need 50 s of refill at 1 event/s: refused however slow this machine is.
    const refused = await u.api.post(`/v1/workflows/${p}/events`, { json: batch(LIMITS.INGRESS_BURST_EVENTS_PER_USER) });
    expectError(refused, 429, /ingress rate limit: at most 1 events per second per user \(bursts of 50\)/);
    expect(refused.body.code).toBe("rate_limited");
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(30);
    expect(retryAfter).toBeLessThanOrEqual(50);
    expectError(await u.api.post(`/v1/workflows/${p}/$errors/events`, { json: { error: { msg: "x" } } }), 429);
    const summaries = await u.api.get(`/v1/workflows/${p}/event_summaries`, { query: { limit: 100 } });
    expect(summaries.body.page_info.total_count).toBe(LIMITS.INGRESS_BURST_EVENTS_PER_USER);
    // Another user's bucket is untouched.
    const other = await td.createUser();
    await emit(other.api, workflowId(), { fine: true });
  });

  it("counts HTTP source requests against the same per-user bucket", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    const endpoint = String(s.configured_props.http.endpoint_url);
    expectStatus(await client(td.url).post(endpoint, { json: { first: true } }), 200);
    // The user's workflow emits empty the bucket the endpoint shares.
    const p = workflowId();
    const rest = LIMITS.INGRESS_BURST_EVENTS_PER_USER - 1;
    expectStatus(
      await u.api.post(`/v1/workflows/${p}/events`, { json: { events: Array.from({ length: rest }, () => ({ event: 1 })) } }),
      202,
    );
    const refused = await client(td.url).post(endpoint, { json: { second: true } });
    expectError(refused, 429, /ingress rate limit/);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  });

  it("answers 413 to a batch larger than the burst, which could never pass", async () => {
    const u = await td.createUser();
    const res = await u.api.post(`/v1/workflows/${workflowId()}/events`, {
      json: { events: Array.from({ length: LIMITS.INGRESS_BURST_EVENTS_PER_USER + 1 }, () => ({ event: 1 })) },
    });
    expectError(res, 413, /a request of 51 events is more than this user's ingress burst of 50 events/);
  });
});

describe("GET /users/me limits", () => {
  it("shows every limit with the user's usage", async () => {
    const u = await td.createUser();
    const hook = await createWebhook(u.api, "https://example.com/me");
    const c = await createComponent(u.api, uniqueComponent());
    const s = await createSource(u.api, { component_id: c.id });
    await subscribe(u.api, s.id, hook.id);
    await putWorkflow(u.api);
    expectStatus(await u.api.post("/v1/auto_subscriptions", { query: { listener_id: hook.id, event_name: "me" } }), 200);
    const limits = await usage(u.api);
    expect(limits).toEqual({
      workflows: { limit: 16, used: 1 },
      sources: { limit: 3, used: 1 },
      components: { limit: 3, used: 1 },
      webhooks: { limit: 3, used: 1 },
      subscriptions: { limit: 6, used: 1 },
      auto_subscriptions: { limit: 2, used: 1 },
      component_bytes: { limit: 20_000, used: expect.any(Number) },
      streams: { limit: 10_000, used: 0 },
      stored_bytes: { limit: 100 * 1024 * 1024, used: 0 },
      listeners_per_emitter: { limit: 3 },
      ingress_events_per_second: { limit: 1, burst: 50 },
    });
    expect(limits.component_bytes.used).toBeGreaterThan(c.code.length);
    // The paid shape carries the same object.
    const paid = await td.createUser("paid");
    expect((await usage(paid.api)).workflows).toEqual({ limit: 16, used: 0 });
  });

  it("counts what was stored before limits existed (no size recorded for old components)", async () => {
    const u = await td.createUser();
    await createComponent(u.api, uniqueComponent());
    const before = (await usage(u.api)).component_bytes.used;
    const redis = connectRedis();
    const keys = createKeys(td.prefix);
    try {
      // As the daemon left them before sizes were recorded: no entry in the sizes hash, and a
      // workflow written without the limit script.
      await redis.del(keys.componentSizes(u.id));
      const legacy = workflowId();
      await redis.set(
        keys.workflow(u.id, legacy),
        JSON.stringify({ id: legacy, name: null, trigger_url: null, created_at: 1, updated_at: 1 }),
      );
      await redis.zadd(keys.workflows(u.id), Date.now(), legacy);
    } finally {
      redis.disconnect();
    }
    const after = await usage(u.api);
    expect(after.component_bytes.used).toBe(before);
    expect(after.workflows.used).toBe(1);
  });
});
