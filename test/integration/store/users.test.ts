import { randomBytes } from "node:crypto";
import { Cluster, type Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConflictError, NotFoundError } from "../../../src/domain/errors.js";
import { createKeys, type Keys } from "../../../src/store/keys.js";
import { UserStore } from "../../../src/store/users.js";
import { type LocalCluster, startCluster } from "../../helpers/cluster.js";
import { dropPrefix, keySpacePerTest, testPrefix } from "../../helpers/redis.js";

/**
 * UserStore's cross-tag writes (docs/decisions.md "Cross-tag writes"): a create is three ordered
 * steps (username claim, record in the user's shard, global commit) and a crash between two must
 * neither leave anything a key reaches nor block a retry; the key state lives in the global tag.
 * A crash is simulated by writing what the first step(s) would have written, then retrying.
 */
const space = keySpacePerTest();
const storeOf = (redis: Redis | Cluster, keys: Keys) => new UserStore({ redis, keys, now: Date.now, randomBytes });
const uniqueName = () => `n${randomBytes(5).toString("hex")}`;
const input = (username: string) => ({ username, email: "a@example.com", plan: "free" as const });

/** What a create that stopped after step 1 (or step 2, with `record`) left behind. */
async function orphanClaim(username: string, record: boolean): Promise<string> {
  const { redis, keys } = space;
  const orphan = `u_orphan${randomBytes(4).toString("hex")}`;
  await redis.hset(keys.usernames(), username, orphan);
  if (record) {
    await redis.set(keys.user(orphan), JSON.stringify({ id: orphan, username, email: "o@example.com", plan: "free", created_at: 1 }));
  }
  return orphan;
}

describe("UserStore.create", () => {
  it("keeps the key state in the global tag, not in the user record, and reads it back as before", async () => {
    const store = storeOf(space.redis, space.keys);
    const { user, apiKey } = await store.create(input(uniqueName()));
    const stored = JSON.parse((await space.redis.get(space.keys.user(user.id))) ?? "{}");
    expect(stored.api_key_hash).toBeUndefined();
    expect(stored.api_key_last4).toBeUndefined();
    expect(await space.redis.hget(space.keys.apiKeyOf(), user.id)).toBe(`${user.api_key_hash} ${apiKey.slice(-4)}`);
    expect(await store.get(user.id)).toEqual(user);
    expect(await store.authenticate(apiKey)).toBe(user.id);
    expect((await store.list()).map((u) => u.id)).toEqual([user.id]);
  });

  it("lets a retry take a username whose create stopped after the claim", async () => {
    const store = storeOf(space.redis, space.keys);
    const username = uniqueName();
    const orphan = await orphanClaim(username, false);
    const { user, apiKey } = await store.create(input(username));
    expect(await space.redis.hget(space.keys.usernames(), username)).toBe(user.id);
    expect(await store.authenticate(apiKey)).toBe(user.id);
    expect(await space.redis.zscore(space.keys.users(), orphan)).toBeNull();
  });

  it("lets a retry take a username whose create stopped after the record, and drops the orphan record", async () => {
    const store = storeOf(space.redis, space.keys);
    const username = uniqueName();
    const orphan = await orphanClaim(username, true);
    // The orphan is reachable by nothing: no key, not listed.
    expect(await store.list()).toEqual([]);
    const { user } = await store.create(input(username));
    expect(await space.redis.hget(space.keys.usernames(), username)).toBe(user.id);
    expect(await space.redis.exists(space.keys.user(orphan))).toBe(0);
    expect((await store.list()).map((u) => u.id)).toEqual([user.id]);
  });

  it("still refuses a username a committed user holds", async () => {
    const store = storeOf(space.redis, space.keys);
    const username = uniqueName();
    const first = await store.create(input(username));
    await expect(store.create(input(username))).rejects.toBeInstanceOf(ConflictError);
    expect(await space.redis.hget(space.keys.usernames(), username)).toBe(first.user.id);
    expect(await space.redis.hlen(space.keys.apiKeys())).toBe(1);
  });

  it("gives a username to exactly one of several concurrent creates, and leaves no stray record", async () => {
    const store = storeOf(space.redis, space.keys);
    const username = uniqueName();
    const results = await Promise.allSettled(Array.from({ length: 8 }, () => store.create(input(username))));
    const won = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
    expect(won).toHaveLength(1);
    for (const r of results) if (r.status === "rejected") expect(r.reason).toBeInstanceOf(ConflictError);
    const winner = won[0]?.user.id;
    expect(await space.redis.hget(space.keys.usernames(), username)).toBe(winner);
    expect(await space.redis.zrange(space.keys.users(), 0, -1)).toEqual([winner]);
    expect(await space.redis.hvals(space.keys.apiKeys())).toEqual([winner]);
    expect((await space.redis.keys(`${space.prefix}:*:user`)).length).toBe(1);
  });
});

describe("UserStore.rotateKey", () => {
  it("moves the key in one step: the old one stops, the new one works, last4 follows", async () => {
    const store = storeOf(space.redis, space.keys);
    const { user, apiKey } = await store.create(input(uniqueName()));
    const revoked: string[] = [];
    store.revocations.listen((d) => revoked.push(d));
    const next = await store.rotateKey(user.id);
    expect(await store.authenticate(apiKey)).toBeUndefined();
    expect(await store.authenticate(next)).toBe(user.id);
    expect(revoked).toEqual([user.api_key_hash]);
    const after = await store.require(user.id);
    expect(after.api_key_last4).toBe(next.slice(-4));
    expect(after.api_key_hash).toBe(store.digestOf(next));
    expect(await space.redis.hlen(space.keys.apiKeys())).toBe(1);
  });

  it("reads and rotates a user written before the key state moved (digest and last4 in the record)", async () => {
    const { redis, keys } = space;
    const store = storeOf(redis, keys);
    const id = `u_old${randomBytes(4).toString("hex")}`;
    const oldKey = `trib_${randomBytes(20).toString("hex")}`;
    const digest = store.digestOf(oldKey) as string;
    const legacy = {
      id,
      username: uniqueName(),
      email: "o@example.com",
      plan: "paid",
      created_at: 5,
      api_key_hash: digest,
      api_key_last4: oldKey.slice(-4),
    };
    await redis.set(keys.user(id), JSON.stringify(legacy));
    await redis.hset(keys.apiKeys(), digest, id);
    await redis.hset(keys.usernames(), legacy.username, id);
    await redis.zadd(keys.users(), 5000, id);
    expect(await store.get(id)).toEqual(legacy);
    expect(await store.authenticate(oldKey)).toBe(id);
    const next = await store.rotateKey(id);
    expect(await store.authenticate(oldKey)).toBeUndefined();
    expect(await store.authenticate(next)).toBe(id);
    expect((await store.get(id))?.api_key_last4).toBe(next.slice(-4));
    await store.delete(id);
    expect(await redis.hlen(keys.apiKeys())).toBe(0);
    expect(await redis.hlen(keys.apiKeyOf())).toBe(0);
    expect(await redis.exists(keys.user(id))).toBe(0);
  });

  it("refuses a user deleted meanwhile without indexing a key for it", async () => {
    const store = storeOf(space.redis, space.keys);
    const { user } = await store.create(input(uniqueName()));
    // What a concurrent deletion does between rotateKey's read and its script.
    await space.redis.zrem(space.keys.users(), user.id);
    await space.redis.hdel(space.keys.apiKeys(), user.api_key_hash);
    await expect(store.rotateKey(user.id)).rejects.toBeInstanceOf(NotFoundError);
    expect(await space.redis.hlen(space.keys.apiKeys())).toBe(0);
  });
});

describe("UserStore.delete", () => {
  it("finishes when run again after stopping between the global step and the unlink", async () => {
    const { redis, keys } = space;
    const store = storeOf(redis, keys);
    const { user, apiKey } = await store.create(input(uniqueName()));
    await redis.set(keys.sourceDb(user.id, "dc_x"), "{}");
    // The global step alone (what a crash right after it leaves).
    await redis
      .multi()
      .hdel(keys.apiKeyOf(), user.id)
      .hdel(keys.apiKeys(), user.api_key_hash)
      .hdel(keys.usernames(), user.username)
      .zrem(keys.users(), user.id)
      .exec();
    expect(await store.authenticate(apiKey)).toBeUndefined();
    await store.delete(user.id);
    expect(await redis.keys(`${keys.userKeyBase(user.id)}:*`)).toEqual([]);
  });
});

describe("on a Redis Cluster client", () => {
  let cluster: LocalCluster | undefined;
  let client: Cluster | undefined;
  const prefix = testPrefix();
  beforeAll(async () => {
    cluster = await startCluster({ masters: 3 });
    client = new Cluster([...cluster.seeds], { redisOptions: { maxRetriesPerRequest: 2 } });
  }, 60_000);
  afterAll(async () => {
    client?.disconnect();
    await cluster?.stop();
  });

  it("creates, rotates and deletes users (every user key scanned on its slot's master), and dropPrefix empties every master", async () => {
    const c = client as Cluster;
    const keys = createKeys(prefix);
    const store = storeOf(c, keys);
    const made = await Promise.all(Array.from({ length: 6 }, () => store.create(input(uniqueName()))));
    for (const { user } of made) await c.set(keys.sourceDb(user.id, "dc_x"), "{}");
    const [gone, kept] = made;
    if (!gone || !kept) throw new Error("no users");
    const next = await store.rotateKey(gone.user.id);
    expect(await store.authenticate(next)).toBe(gone.user.id);
    await store.delete(gone.user.id);
    expect(await store.authenticate(next)).toBeUndefined();
    const left = async (pattern: string) => (await Promise.all(c.nodes("master").map((n) => n.keys(pattern)))).flat();
    expect(await left(keys.userPattern(gone.user.id))).toEqual([]);
    expect(await left(keys.userPattern(kept.user.id))).toHaveLength(2);
    // The users' shards sit on more than one master, so dropPrefix must visit them all. Users land
    // on a random shard: with five, all on the master of the global keys happens about once in 250
    // runs; more users are made until two masters hold keys (bounded: 30 more).
    const holdingMasters = async () =>
      (await Promise.all(c.nodes("master").map(async (n) => (await n.keys(`${prefix}:*`)).length))).filter((n) => n > 0).length;
    for (let extra = 0; extra < 30 && (await holdingMasters()) < 2; extra++) {
      const { user } = await store.create(input(uniqueName()));
      await c.set(keys.sourceDb(user.id, "dc_x"), "{}");
    }
    expect(await holdingMasters()).toBeGreaterThan(1);
    await dropPrefix(c, prefix);
    expect(await left(`${prefix}:*`)).toEqual([]);
  });
});
