import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { AppError } from "../../../src/domain/errors.js";
import { UNLIMITED, type UserLimits } from "../../../src/domain/limits.js";
import { RateLimiter } from "../../../src/store/rate-limit.js";
import { IngressRate } from "../../../src/services/ingress-rate.js";
import { ComponentStore, type NewComponent } from "../../../src/store/components.js";
import type { StoreContext } from "../../../src/store/context.js";
import { SourceStore, type SourceRecord } from "../../../src/store/sources.js";
import { SubscriptionStore } from "../../../src/store/subscriptions.js";
import { WebhookStore } from "../../../src/store/webhooks.js";
import { WorkflowStore } from "../../../src/store/workflows.js";
import { keySpacePerTest } from "../../helpers/redis.js";

/**
 * The limit scripts against real Redis. Every race here starts all its creates in the same tick,
 * so each one's reads reach Redis before any write does: a check made apart from its write lets
 * them all through, only a check made in the same atomic step lets exactly one through.
 */

const space = keySpacePerTest();
const USER = "u_limits";

function ctx(): StoreContext {
  return { redis: space.redis, keys: space.keys, now: Date.now, randomBytes: (n) => randomBytes(n) };
}

const limits = (patch: Partial<UserLimits>): UserLimits => ({ ...UNLIMITED, ...patch });

/** Settles every promise; returns how many were fulfilled and the errors of the rest. */
async function settle(promises: Promise<unknown>[]): Promise<{ ok: number; errors: AppError[] }> {
  const results = await Promise.allSettled(promises);
  const errors = results.flatMap((r) => (r.status === "rejected" ? [r.reason as AppError] : []));
  return { ok: results.length - errors.length, errors };
}

function expectRefusals(errors: AppError[], name: string): void {
  for (const e of errors) {
    expect(e).toBeInstanceOf(AppError);
    expect(e.status).toBe(429);
    expect(e.code).toBe("limit_exceeded");
    expect(e.message).toMatch(new RegExp(`^${name} limit reached`));
  }
}

const newWebhook = (store: WebhookStore) =>
  store.create(USER, { url: "https://example.com/x", name: null, description: null, signingSecret: "whsec_x" });

function component(tag: string): NewComponent {
  return {
    key: null,
    code: `module.exports = { name: "c ${tag}", async run() {} };`,
    code_hash: `hash-${tag}`,
    name: `c ${tag}`,
    version: "1.0.0",
    description: null,
    configurable_props: [],
    dedupe: null,
    hooks: [],
    component_url: null,
  };
}

function source(id: string): SourceRecord {
  return {
    id,
    user_id: USER,
    component_id: "sc_x",
    configured_props: {},
    active: true,
    created_at: 1,
    updated_at: 1,
    name: id,
    name_slug: id,
    endpoint_token: null,
    http_prop: null,
  };
}

describe("counted creates race for the last slot", () => {
  it("webhooks: exactly one of 10 at limit-1", async () => {
    const store = new WebhookStore(ctx(), limits({ webhooks: 3 }));
    for (let i = 0; i < 2; i++) await newWebhook(store);
    const { ok, errors } = await settle(Array.from({ length: 10 }, () => newWebhook(store)));
    expect(ok).toBe(1);
    expectRefusals(errors, "webhooks");
    expect(await space.redis.zcard(space.keys.webhooks(USER))).toBe(3);
  });

  it("workflows: exactly one of 10 new ones at limit-1; known ones always pass", async () => {
    const store = new WorkflowStore(ctx(), limits({ workflows: 3 }));
    await store.register(USER, "p_a");
    await store.register(USER, "p_b");
    const { ok, errors } = await settle(Array.from({ length: 10 }, (_, i) => store.register(USER, `p_new${i}`)));
    expect(ok).toBe(1);
    expectRefusals(errors, "workflows");
    expect(await store.register(USER, "p_a")).toBe(false);
    expect(await space.redis.zcard(space.keys.workflows(USER))).toBe(3);
  });

  it("sources: exactly one of 10 at limit-1", async () => {
    const store = new SourceStore(ctx(), limits({ sources: 3 }));
    for (let i = 0; i < 2; i++) await store.create(source(`dc_old${i}`), Date.now());
    const { ok, errors } = await settle(Array.from({ length: 10 }, (_, i) => store.create(source(`dc_new${i}`), Date.now())));
    expect(ok).toBe(1);
    expectRefusals(errors, "sources");
    expect(await space.redis.zcard(space.keys.sources(USER))).toBe(3);
  });

  it("components: exactly one of 10 distinct ones at limit-1; identical code still agrees on one", async () => {
    const store = new ComponentStore(ctx(), limits({ components: 3 }));
    for (let i = 0; i < 2; i++) await store.saveOrGet(USER, component(`old${i}`), "compiled");
    const { ok, errors } = await settle(Array.from({ length: 10 }, (_, i) => store.saveOrGet(USER, component(`new${i}`), "compiled")));
    expect(ok).toBe(1);
    expectRefusals(errors, "components");
    const same = await Promise.all(Array.from({ length: 5 }, () => store.saveOrGet(USER, component("old0"), "compiled")));
    expect(new Set(same.map((c) => c.id)).size).toBe(1);
  });

  it("component bytes: the components that fit are saved, the rest refused, never more than the limit", async () => {
    const compiled = "x".repeat(1000);
    const probe = new ComponentStore(ctx());
    await probe.saveOrGet("u_probe", component("probe"), compiled);
    const size = (await probe.usage("u_probe")).bytes;
    const store = new ComponentStore(ctx(), limits({ componentBytes: size * 3 + 10 }));
    const { ok, errors } = await settle(Array.from({ length: 10 }, (_, i) => store.saveOrGet(USER, component(`b${i}`), compiled)));
    expect(ok).toBe(3);
    expectRefusals(errors, "component_bytes");
    expect((await store.usage(USER)).bytes).toBeLessThanOrEqual(size * 3 + 10);
  });

  it("subscriptions: exactly one of 10 at limit-1", async () => {
    const store = new SubscriptionStore(ctx(), limits({ subscriptions: 3 }));
    for (let i = 0; i < 2; i++) await store.create(USER, "p_e", "wh_l", `old${i}`);
    const { ok, errors } = await settle(Array.from({ length: 10 }, (_, i) => store.create(USER, "p_e", "wh_l", `new${i}`)));
    expect(ok).toBe(1);
    expectRefusals(errors, "subscriptions");
  });

  it("listeners of one emitter's event: exactly one of 10 at the cap minus one, the glob counted", async () => {
    const store = new SubscriptionStore(ctx(), limits({ listenersPerEmitter: 3 }));
    await store.create(USER, "dc_*", "wh_glob", "");
    await store.create(USER, "dc_e", "wh_exact", "default");
    const { ok, errors } = await settle(Array.from({ length: 10 }, (_, i) => store.create(USER, "dc_e", `wh_l${i}`, "")));
    expect(ok).toBe(1);
    expectRefusals(errors, "listeners_per_emitter");
    const matched = await store.matching(USER, "dc_e", "");
    expect(matched).toHaveLength(3);
  });

  it("auto-subscriptions: exactly one of 10 at limit-1; identical ones agree on one record", async () => {
    const store = new SubscriptionStore(ctx(), limits({ autoSubscriptions: 2 }));
    await store.createAuto(USER, "wh_a", "first");
    const { ok, errors } = await settle(Array.from({ length: 10 }, (_, i) => store.createAuto(USER, "wh_a", `new${i}`)));
    expect(ok).toBe(1);
    expectRefusals(errors, "auto_subscriptions");
    const free = new SubscriptionStore(ctx());
    const same = await Promise.all(Array.from({ length: 5 }, () => free.createAuto("u_other", "wh_b", "default")));
    expect(new Set(same.map((a) => a.id)).size).toBe(1);
    expect((await free.createAuto("u_other", "wh_b", "")).id).toBe(same[0]?.id);
  });
});

describe("existing data and unlimited", () => {
  it("counts entries written before limits existed, and takes over a subscription claim whose record never landed", async () => {
    await space.redis.zadd(space.keys.webhooks(USER), 1, "wh_legacy1", 2, "wh_legacy2");
    const webhooks = new WebhookStore(ctx(), limits({ webhooks: 3 }));
    await newWebhook(webhooks);
    await expect(newWebhook(webhooks)).rejects.toThrow(/webhooks limit reached: this user has 3 webhooks/);

    await space.redis.hset(space.keys.subscriptionTriples(USER), "p_e\nwh_l\n", "sub_lost");
    const subs = new SubscriptionStore(ctx(), limits({ subscriptions: 5 }));
    const made = await subs.create(USER, "p_e", "wh_l", "default");
    expect(made.id).not.toBe("sub_lost");
    expect((await subs.create(USER, "p_e", "wh_l", "")).id).toBe(made.id);
  });

  it("measures components saved before sizes were recorded", async () => {
    const store = new ComponentStore(ctx(), limits({ componentBytes: 100_000 }));
    await store.saveOrGet(USER, component("a"), "compiled a");
    await store.saveOrGet(USER, component("b"), "compiled b");
    const before = await store.usage(USER);
    await space.redis.del(space.keys.componentSizes(USER));
    expect(await store.usage(USER)).toEqual(before);
    expect(before.count).toBe(2);
    expect(before.bytes).toBeGreaterThan(0);
  });

  it("0 means unlimited", async () => {
    const webhooks = new WebhookStore(ctx(), UNLIMITED);
    await Promise.all(Array.from({ length: 30 }, () => newWebhook(webhooks)));
    expect(await space.redis.zcard(space.keys.webhooks(USER))).toBe(30);
    const subs = new SubscriptionStore(ctx(), UNLIMITED);
    await Promise.all(Array.from({ length: 30 }, (_, i) => subs.create(USER, "p_e", `wh_${i}`, "")));
    expect(await subs.matching(USER, "p_e", "")).toHaveLength(30);
  });
});

describe("IngressRate", () => {
  it("takes one token per event, answers 429 with the wait once the bucket is empty, 413 above the burst", async () => {
    let now = 1_000_000;
    const perSecond = 10;
    const burst = 20;
    const rate = new IngressRate(new RateLimiter(space.redis, perSecond, burst, () => now), (u) => space.keys.ingressRate(u), {
      perSecond,
      burst,
    });
    await rate.admit(USER, 15);
    await rate.admit(USER, 5);
    const refused = await rate.admit(USER, 5).catch((e: AppError) => e);
    expect(refused).toBeInstanceOf(AppError);
    expect((refused as AppError).status).toBe(429);
    expect((refused as AppError).code).toBe("rate_limited");
    // 5 tokens at 10/s: half a second, shown as the whole second Retry-After carries.
    expect((refused as AppError).headers["retry-after"]).toBe("1");
    now += 500;
    await rate.admit(USER, 5);
    await rate.admit("u_someone_else", 20);
    const tooBig = await rate.admit(USER, 21).catch((e: AppError) => e);
    expect((tooBig as AppError).status).toBe(413);
  });

  it("touches nothing when the rate is unlimited", async () => {
    const rate = new IngressRate(new RateLimiter(space.redis, 0, 1), (u) => space.keys.ingressRate(u), { perSecond: 0, burst: 1 });
    await rate.admit(USER, 100_000);
    expect(await space.redis.exists(space.keys.ingressRate(USER))).toBe(0);
  });
});
