import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeys } from "../../../src/store/keys.js";
import { type PayloadRef, PayloadStore, sharesPayload } from "../../../src/store/payloads.js";
import { UserStore } from "../../../src/store/users.js";
import { connectRedis, dropPrefix, testPrefix } from "../../helpers/redis.js";

/** Stored payloads against a real Redis: holders, releases, deletion with the events and with the user. */
const prefix = testPrefix();
const keys = createKeys(prefix);
let redis: Redis;
let store: PayloadStore;

beforeAll(() => {
  redis = connectRedis();
  store = new PayloadStore(redis, keys);
});
afterAll(async () => {
  await dropPrefix(redis, prefix);
  redis.disconnect();
});

const ref = (eventId: string, channel = "orders", userId = "u_pay"): PayloadRef => ({ userId, emitterId: "dc_src", channel, eventId });
const big = "y".repeat(2000);

describe("PayloadStore", () => {
  it("stores a payload once for its holders; holding or releasing twice counts once; the last release deletes it", async () => {
    expect(sharesPayload(big)).toBe(true);
    expect(sharesPayload('{"small":1}')).toBe(false);
    const e = ref("100-0");
    await store.hold(e, big, ["d_a", "d_b"]);
    await store.hold(e, "another text never replaces the first", ["d_a"]);
    expect(await store.get(e)).toBe(big);
    await store.release(e, ["d_a"]);
    await store.release(e, ["d_a"]);
    expect(await store.get(e)).toBe(big);
    await store.release(e, ["d_b"]);
    expect(await store.get(e)).toBeUndefined();
    expect(await redis.exists(store.keyOf(e))).toBe(0);
  });

  it("deletes the payloads of one emitter and channel in an id range with their events, and no other channel's", async () => {
    for (const id of ["100-0", "200-0", "200-5", "300-0"]) await store.hold(ref(id), big, ["d_1"]);
    await store.hold(ref("200-0", "orders:eu"), big, ["d_1"]);
    expect(await store.deleteRange("u_pay", "dc_src", "orders", "150-0", "200-5")).toBe(2);
    expect(await store.get(ref("100-0"))).toBe(big);
    expect(await store.get(ref("200-0"))).toBeUndefined();
    expect(await store.get(ref("200-5"))).toBeUndefined();
    expect(await store.get(ref("300-0"))).toBe(big);
    expect(await store.deleteRange("u_pay", "dc_src", "orders", null, null)).toBe(2);
    expect(await store.get(ref("100-0"))).toBeUndefined();
    // A channel whose name extends another's keeps its payloads.
    expect(await store.get(ref("200-0", "orders:eu"))).toBe(big);
  });

  it("goes with its user", async () => {
    const users = new UserStore({ redis, keys, now: Date.now, randomBytes });
    const { user } = await users.create({ username: "payloads", email: "p@example.com", plan: "free" });
    const e = ref("500-0", "orders", user.id);
    await store.hold(e, big, ["d_1"]);
    await users.delete(user.id);
    expect(await redis.exists(store.keyOf(e))).toBe(0);
  });
});
