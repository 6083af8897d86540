import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { type SourceRecord, SourceStore } from "../../../src/store/sources.js";
import { keySpacePerTest } from "../../helpers/redis.js";

/**
 * SourceStore's writes across the user's shard and the global endpoints hash
 * (docs/decisions.md "Cross-tag writes"): each is two ordered steps, and running the same write
 * again after a crash between them finishes it. A crash is simulated by leaving the store in the
 * state its first step alone produces.
 */
const space = keySpacePerTest();
const storeOf = () => new SourceStore({ redis: space.redis, keys: space.keys, now: Date.now, randomBytes });

function httpSource(): SourceRecord {
  const id = `dc_${randomBytes(6).toString("hex")}`;
  return {
    id,
    user_id: `u_${randomBytes(6).toString("hex")}`,
    component_id: "sc_abc",
    configured_props: {},
    active: true,
    created_at: 1,
    updated_at: 1,
    name: id,
    name_slug: id,
    endpoint_token: randomBytes(12).toString("hex"),
    http_prop: "http",
  };
}

describe("SourceStore.save with an endpoint token", () => {
  it("writes the source before its token, and saving again after a crash in between indexes the token", async () => {
    const store = storeOf();
    const { redis, keys } = space;
    const s = { ...httpSource(), endpoint_token: null };
    await store.create(s, 1);
    // An update that gives the source a token, stopped after its first step (the user MULTI).
    const updated: SourceRecord = { ...s, endpoint_token: randomBytes(12).toString("hex"), updated_at: 2 };
    await store.save(updated, 0);
    await redis.hdel(keys.endpoints(), updated.endpoint_token as string);
    expect(await store.get(s.user_id, s.id)).toEqual(updated);
    expect(await store.endpoint(updated.endpoint_token as string)).toBeUndefined();
    // The retry: the service keeps the token the record holds, so it writes the same entry.
    const stored = (await store.get(s.user_id, s.id)) as SourceRecord;
    await store.save({ ...stored, updated_at: 3 }, 0);
    expect(await store.endpoint(updated.endpoint_token as string)).toEqual({ userId: s.user_id, sourceId: s.id });
    expect(await redis.zrange(keys.sources(s.user_id), 0, -1)).toEqual([s.id]);
  });

  it("reports a failed token step after the record is written, and saving again finishes it", async () => {
    const store = storeOf();
    const { redis, keys } = space;
    const s = httpSource();
    await store.create(s, 1);
    await redis.del(keys.endpoints());
    await redis.set(keys.endpoints(), "not a hash");
    const updated = { ...s, name: "renamed", updated_at: 2 };
    await expect(store.save(updated, 0)).rejects.toThrow(/WRONGTYPE/);
    expect(await store.get(s.user_id, s.id)).toEqual(updated);
    await redis.del(keys.endpoints());
    await store.save(updated, 0);
    expect(await store.endpoint(s.endpoint_token as string)).toEqual({ userId: s.user_id, sourceId: s.id });
  });
});

describe("SourceStore.delete with an endpoint token", () => {
  it("drops the token first, and deleting again after a crash in between removes the source", async () => {
    const store = storeOf();
    const { redis, keys } = space;
    const s = httpSource();
    await store.create(s, 1);
    await redis.set(keys.sourceDb(s.user_id, s.id), "{}");
    // Stopped after the first step: the token is gone, the source is still there.
    await redis.hdel(keys.endpoints(), s.endpoint_token as string);
    expect(await store.get(s.user_id, s.id)).toEqual(s);
    await store.delete(s);
    expect(await store.get(s.user_id, s.id)).toBeUndefined();
    expect(await redis.keys(`${keys.userKeyBase(s.user_id)}:*`)).toEqual([]);
    expect(await redis.hlen(keys.endpoints())).toBe(0);
  });

  it("touches nothing of the source when its first step fails, so the delete can be made again", async () => {
    const store = storeOf();
    const { redis, keys } = space;
    const s = httpSource();
    await store.create(s, 1);
    const entries = await redis.hgetall(keys.endpoints());
    // The endpoints hash made unwritable (a wrong type) fails the first step.
    await redis.del(keys.endpoints());
    await redis.set(keys.endpoints(), "not a hash");
    await expect(store.delete(s)).rejects.toThrow(/WRONGTYPE/);
    expect(await store.get(s.user_id, s.id)).toEqual(s);
    await redis.del(keys.endpoints());
    await redis.hset(keys.endpoints(), entries);
    await store.delete(s);
    expect(await store.get(s.user_id, s.id)).toBeUndefined();
    expect(await redis.hlen(keys.endpoints())).toBe(0);
  });

  it("leaves no token behind when the source goes", async () => {
    const store = storeOf();
    const s = httpSource();
    await store.create(s, 1);
    expect(await store.endpoint(s.endpoint_token as string)).toEqual({ userId: s.user_id, sourceId: s.id });
    await store.delete(s);
    expect(await store.endpoint(s.endpoint_token as string)).toBeUndefined();
    expect(await space.redis.hlen(space.keys.endpoints())).toBe(0);
  });
});
