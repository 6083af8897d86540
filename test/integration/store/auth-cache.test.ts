import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../../src/observability/logger.js";
import { AuthCache } from "../../../src/store/auth-cache.js";
import { createKeys } from "../../../src/store/keys.js";
import { UserStore } from "../../../src/store/users.js";
import { waitFor } from "../../helpers/receiver.js";
import { sharedKeySpace } from "../../helpers/redis.js";

/**
 * The API-key cache against a real Redis: two "processes" (each its own UserStore, AuthCache and
 * subscriber connection) share one key space, as two API processes would.
 */
const space = sharedKeySpace();
const keys = createKeys(space.prefix);
const logger = createLogger("silent");
let redis: Redis;

function process_() {
  const conn = space.connect();
  const subscriber = space.connect();
  const store = new UserStore({ redis: conn, keys, now: Date.now, randomBytes });
  const cache = new AuthCache(store, { subscriber, channel: keys.apiKeyRevocations(), logger });
  return { store, cache, subscriber };
}

beforeAll(() => {
  redis = space.redis();
});

const newUser = (store: UserStore) =>
  store.create({ username: `u${randomBytes(4).toString("hex")}`, email: "a@example.com", plan: "free" });

describe("AuthCache", () => {
  it("answers a known key from memory: the index entry can vanish behind its back", async () => {
    const a = process_();
    await a.cache.start();
    expect(a.cache.isLive()).toBe(true);
    const { user, apiKey } = await newUser(a.store);
    expect(await a.cache.authenticate(apiKey)).toBe(user.id);
    // Removed without the revocation message (no writer of ours does this): the cache still answers.
    await redis.hdel(keys.apiKeys(), a.store.digestOf(apiKey) as string);
    expect(await a.cache.authenticate(apiKey)).toBe(user.id);
    expect(await a.store.authenticate(apiKey)).toBeUndefined();
  });

  it("revokes a rotated key at once in the rotating process and on the message in the others", async () => {
    const a = process_();
    const b = process_();
    await Promise.all([a.cache.start(), b.cache.start()]);
    const { user, apiKey } = await newUser(a.store);
    expect(await a.cache.authenticate(apiKey)).toBe(user.id);
    expect(await b.cache.authenticate(apiKey)).toBe(user.id);

    const fresh = await a.store.rotateKey(user.id);
    expect(await a.cache.authenticate(apiKey)).toBeUndefined();
    await waitFor(async () => (await b.cache.authenticate(apiKey)) === undefined, { what: "process b to drop the rotated key" });
    expect(await a.cache.authenticate(fresh)).toBe(user.id);
    expect(await b.cache.authenticate(fresh)).toBe(user.id);
  });

  it("revokes the key of a deleted user", async () => {
    const a = process_();
    const b = process_();
    await Promise.all([a.cache.start(), b.cache.start()]);
    const { user, apiKey } = await newUser(a.store);
    expect(await b.cache.authenticate(apiKey)).toBe(user.id);
    await a.store.delete(user.id);
    expect(await a.cache.authenticate(apiKey)).toBeUndefined();
    await waitFor(async () => (await b.cache.authenticate(apiKey)) === undefined, { what: "process b to drop the deleted user's key" });
  });

  it("reads Redis while its subscriber is down, and caches again once it is back", async () => {
    const a = process_();
    await a.cache.start();
    const { user, apiKey } = await newUser(a.store);
    expect(await a.cache.authenticate(apiKey)).toBe(user.id);

    // The subscription drops (and with it any message sent meanwhile): the cache must not be trusted.
    await a.subscriber.disconnect(true);
    await waitFor(async () => !a.cache.isLive(), { what: "the cache to notice the lost subscription" });
    await redis.hdel(keys.apiKeys(), a.store.digestOf(apiKey) as string);
    expect(await a.cache.authenticate(apiKey)).toBeUndefined();

    await waitFor(async () => a.cache.isLive(), { what: "the cache to resubscribe" });
    await redis.hset(keys.apiKeys(), a.store.digestOf(apiKey) as string, user.id);
    expect(await a.cache.authenticate(apiKey)).toBe(user.id);
    await redis.hdel(keys.apiKeys(), a.store.digestOf(apiKey) as string);
    expect(await a.cache.authenticate(apiKey)).toBe(user.id); // cached again
  });

  it("reads Redis again once stopped", async () => {
    const a = process_();
    await a.cache.start();
    const { user, apiKey } = await newUser(a.store);
    expect(await a.cache.authenticate(apiKey)).toBe(user.id);
    await a.cache.stop();
    expect(a.cache.isLive()).toBe(false);
    await redis.hdel(keys.apiKeys(), a.store.digestOf(apiKey) as string);
    expect(await a.cache.authenticate(apiKey)).toBeUndefined();
  });

  it("refuses strings that cannot be keys without a lookup", async () => {
    const a = process_();
    await a.cache.start();
    expect(await a.cache.authenticate("short")).toBeUndefined();
    expect(await a.cache.authenticate("x".repeat(201))).toBeUndefined();
  });
});
