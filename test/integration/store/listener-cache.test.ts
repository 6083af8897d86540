import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../../src/observability/logger.js";
import { createKeys } from "../../../src/store/keys.js";
import { UserStore } from "../../../src/store/users.js";
import { ListenerCache } from "../../../src/store/listener-cache.js";
import { WebhookStore } from "../../../src/store/webhooks.js";
import { WorkflowStore } from "../../../src/store/workflows.js";
import { waitFor } from "../../helpers/receiver.js";
import { sharedKeySpace } from "../../helpers/redis.js";

/**
 * The delivery worker's listener cache (webhooks and workflows) against a real Redis: two
 * "processes" (each its own stores, ListenerCache and subscriber connection) share one key space,
 * as an API and a worker process would.
 */
const space = sharedKeySpace();
const keys = createKeys(space.prefix);
const logger = createLogger("silent");
let redis: Redis;

function process_() {
  const conn = space.connect();
  const subscriber = space.connect();
  const ctx = { redis: conn, keys, now: Date.now, randomBytes };
  const webhooks = new WebhookStore(ctx);
  const workflows = new WorkflowStore(ctx);
  const cache = new ListenerCache(webhooks, workflows, { subscriber, channel: keys.listenerChanges(), logger });
  return { webhooks, workflows, users: new UserStore(ctx), cache, subscriber };
}

beforeAll(() => {
  redis = space.redis();
});

const newHook = (store: WebhookStore, userId: string) =>
  store.create(userId, { url: "https://example.com/hook", name: null, description: null, signingSecret: "whsec_dGVzdA==" });

/** Overwrites the stored record behind every cache's back (no writer of ours does this). */
async function rewriteBehindTheBack(userId: string, id: string, url: string): Promise<void> {
  const raw = JSON.parse((await redis.get(keys.webhook(userId, id))) as string);
  await redis.set(keys.webhook(userId, id), JSON.stringify({ ...raw, url }));
}

describe("ListenerCache: webhooks", () => {
  it("answers a webhook it read from memory", async () => {
    const a = process_();
    await a.cache.start();
    expect(a.cache.isLive()).toBe(true);
    const hook = await newHook(a.webhooks, "u_cache1");
    expect((await a.cache.get("u_cache1", hook.id))?.url).toBe("https://example.com/hook");
    await rewriteBehindTheBack("u_cache1", hook.id, "https://example.com/other");
    expect((await a.cache.get("u_cache1", hook.id))?.url).toBe("https://example.com/hook");
  });

  it("sees an update at once in the updating process and on the message in the others", async () => {
    const a = process_();
    const b = process_();
    await Promise.all([a.cache.start(), b.cache.start()]);
    const hook = await newHook(a.webhooks, "u_cache2");
    expect((await a.cache.get("u_cache2", hook.id))?.active).toBe(true);
    expect((await b.cache.get("u_cache2", hook.id))?.active).toBe(true);

    await a.webhooks.update("u_cache2", hook.id, { active: false, url: "https://example.com/new" });
    expect(await a.cache.get("u_cache2", hook.id)).toMatchObject({ active: false, url: "https://example.com/new" });
    await waitFor(async () => (await b.cache.get("u_cache2", hook.id))?.active === false, { what: "process b to see the update" });
    expect((await b.cache.get("u_cache2", hook.id))?.url).toBe("https://example.com/new");
  });

  it("sees a secret rotation at once in the rotating process and on the message in the others", async () => {
    const a = process_();
    const b = process_();
    await Promise.all([a.cache.start(), b.cache.start()]);
    const hook = await newHook(a.webhooks, "u_cacheRot");
    expect((await b.cache.get("u_cacheRot", hook.id))?.signing_secret).toBe(hook.signing_secret);

    const next = `whsec_${randomBytes(24).toString("base64")}`;
    const rotated = await a.webhooks.rotateSecret("u_cacheRot", hook.id, next, 60_000);
    expect(rotated).toMatchObject({ signing_secret: next, previous_signing_secret: hook.signing_secret });
    expect(await a.cache.get("u_cacheRot", hook.id)).toMatchObject({ signing_secret: next, previous_signing_secret: hook.signing_secret });
    await waitFor(async () => (await b.cache.get("u_cacheRot", hook.id))?.signing_secret === next, {
      what: "process b to see the rotated secret",
    });
    expect((await b.cache.get("u_cacheRot", hook.id))?.previous_signing_secret).toBe(hook.signing_secret);
  });

  it("forgets a deleted webhook, and every webhook of a deleted user", async () => {
    const a = process_();
    const b = process_();
    await Promise.all([a.cache.start(), b.cache.start()]);
    const gone = await newHook(a.webhooks, "u_cache3");
    const kept = await newHook(a.webhooks, "u_cache3b");
    expect(await b.cache.get("u_cache3", gone.id)).toBeDefined();
    expect(await b.cache.get("u_cache3b", kept.id)).toBeDefined();
    await a.webhooks.delete("u_cache3", gone.id);
    expect(await a.cache.get("u_cache3", gone.id)).toBeUndefined();
    await waitFor(async () => (await b.cache.get("u_cache3", gone.id)) === undefined, { what: "process b to drop the deleted webhook" });

    const { user } = await a.users.create({ username: `u${randomBytes(4).toString("hex")}`, email: "a@example.com", plan: "free" });
    const hooks = [await newHook(a.webhooks, user.id), await newHook(a.webhooks, user.id)];
    for (const h of hooks) expect(await b.cache.get(user.id, h.id)).toBeDefined();
    await a.users.delete(user.id);
    await waitFor(async () => (await Promise.all(hooks.map((h) => b.cache.get(user.id, h.id)))).every((h) => h === undefined), {
      what: "process b to drop the deleted user's webhooks",
    });
    // Another user's webhook stays cached.
    await rewriteBehindTheBack("u_cache3b", kept.id, "https://example.com/behind");
    expect((await b.cache.get("u_cache3b", kept.id))?.url).toBe("https://example.com/hook");
  });

  it("reads Redis while its subscriber is down, caches again once it is back, and reads Redis once stopped", async () => {
    const a = process_();
    await a.cache.start();
    const hook = await newHook(a.webhooks, "u_cache4");
    await a.cache.get("u_cache4", hook.id);

    await a.subscriber.disconnect(true);
    await waitFor(async () => !a.cache.isLive(), { what: "the cache to notice the lost subscription" });
    await rewriteBehindTheBack("u_cache4", hook.id, "https://example.com/while-down");
    expect((await a.cache.get("u_cache4", hook.id))?.url).toBe("https://example.com/while-down");

    await waitFor(async () => a.cache.isLive(), { what: "the cache to resubscribe" });
    expect((await a.cache.get("u_cache4", hook.id))?.url).toBe("https://example.com/while-down");
    await rewriteBehindTheBack("u_cache4", hook.id, "https://example.com/after");
    expect((await a.cache.get("u_cache4", hook.id))?.url).toBe("https://example.com/while-down"); // cached again

    await a.cache.stop();
    expect(a.cache.isLive()).toBe(false);
    expect((await a.cache.get("u_cache4", hook.id))?.url).toBe("https://example.com/after");
  });
});

describe("ListenerCache: workflows", () => {
  /** Overwrites a workflow record behind every cache's back. */
  async function rewriteWorkflow(userId: string, id: string, triggerUrl: string): Promise<void> {
    const raw = JSON.parse((await redis.get(keys.workflow(userId, id))) as string);
    await redis.set(keys.workflow(userId, id), JSON.stringify({ ...raw, trigger_url: triggerUrl }));
  }

  it("answers a workflow it read from memory, and sees a trigger_url change at once here and on the message elsewhere", async () => {
    const a = process_();
    const b = process_();
    await Promise.all([a.cache.start(), b.cache.start()]);
    // Set up without a change message (one would race with the reads below).
    await a.workflows.register("u_wfcache1", "p_one");
    await rewriteWorkflow("u_wfcache1", "p_one", "https://example.com/one");
    expect((await b.cache.workflow("u_wfcache1", "p_one"))?.trigger_url).toBe("https://example.com/one");
    await rewriteWorkflow("u_wfcache1", "p_one", "https://example.com/behind");
    expect((await b.cache.workflow("u_wfcache1", "p_one"))?.trigger_url).toBe("https://example.com/one"); // from memory

    expect((await a.cache.workflow("u_wfcache1", "p_one"))?.trigger_url).toBe("https://example.com/behind");
    await a.workflows.upsert("u_wfcache1", "p_one", { trigger_url: "https://example.com/two" });
    expect((await a.cache.workflow("u_wfcache1", "p_one"))?.trigger_url).toBe("https://example.com/two");
    await waitFor(async () => (await b.cache.workflow("u_wfcache1", "p_one"))?.trigger_url === "https://example.com/two", {
      what: "process b to see the new trigger_url",
    });
  });

  it("forgets a deleted workflow, and every workflow of a deleted user", async () => {
    const a = process_();
    const b = process_();
    await Promise.all([a.cache.start(), b.cache.start()]);
    await a.workflows.upsert("u_wfcache2", "p_gone", { trigger_url: "https://example.com/gone" });
    expect(await b.cache.workflow("u_wfcache2", "p_gone")).toBeDefined();
    await a.workflows.delete("u_wfcache2", "p_gone");
    expect(await a.cache.workflow("u_wfcache2", "p_gone")).toBeUndefined();
    await waitFor(async () => (await b.cache.workflow("u_wfcache2", "p_gone")) === undefined, { what: "process b to drop the workflow" });

    const { user } = await a.users.create({ username: `u${randomBytes(4).toString("hex")}`, email: "w@example.com", plan: "free" });
    await a.workflows.upsert(user.id, "p_doomed", { trigger_url: "https://example.com/doomed" });
    expect(await b.cache.workflow(user.id, "p_doomed")).toBeDefined();
    await a.users.delete(user.id);
    await waitFor(async () => (await b.cache.workflow(user.id, "p_doomed")) === undefined, {
      what: "process b to drop the deleted user's workflow",
    });
  });
});
