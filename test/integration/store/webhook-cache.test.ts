import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../../src/observability/logger.js";
import { createKeys } from "../../../src/store/keys.js";
import { UserStore } from "../../../src/store/users.js";
import { WebhookCache } from "../../../src/store/webhook-cache.js";
import { WebhookStore } from "../../../src/store/webhooks.js";
import { waitFor } from "../../helpers/receiver.js";
import { sharedKeySpace } from "../../helpers/redis.js";

/**
 * The delivery worker's webhook cache against a real Redis: two "processes" (each its own stores,
 * WebhookCache and subscriber connection) share one key space, as an API and a worker process would.
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
  const cache = new WebhookCache(webhooks, { subscriber, channel: keys.webhookChanges(), logger });
  return { webhooks, users: new UserStore(ctx), cache, subscriber };
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

describe("WebhookCache", () => {
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
