import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../../src/observability/logger.js";
import type { ComponentRecord } from "../../../src/store/components.js";
import { createKeys } from "../../../src/store/keys.js";
import { SourceCache } from "../../../src/store/source-cache.js";
import { type SourceRecord, SourceStore } from "../../../src/store/sources.js";
import { UserStore } from "../../../src/store/users.js";
import { waitFor } from "../../helpers/receiver.js";
import { sharedKeySpace } from "../../helpers/redis.js";

/**
 * The runtime's source cache (sources, endpoint tokens, components, plans) against a real Redis:
 * two "processes" (each its own stores, SourceCache and subscriber connection) share one key
 * space, as an API and a worker process would.
 */
const space = sharedKeySpace();
const keys = createKeys(space.prefix);
const logger = createLogger("silent");
let redis: Redis;

function process_() {
  const conn = space.connect();
  const subscriber = space.connect();
  const ctx = { redis: conn, keys, now: Date.now, randomBytes };
  const sources = new SourceStore(ctx);
  const cache = new SourceCache(sources, { subscriber, channel: keys.listenerChanges(), logger });
  return { sources, users: new UserStore(ctx), cache, subscriber };
}

beforeAll(() => {
  redis = space.redis();
});

function sourceRecord(userId: string, over: Partial<SourceRecord> = {}): SourceRecord {
  const id = `dc_${randomBytes(6).toString("hex")}`;
  return {
    id,
    user_id: userId,
    component_id: "sc_abc",
    configured_props: {},
    active: true,
    created_at: 1,
    updated_at: 1,
    name: id,
    name_slug: id,
    endpoint_token: randomBytes(12).toString("hex"),
    http_prop: "http",
    ...over,
  };
}

/** Overwrites the stored record behind every cache's back (no writer of ours does this). */
async function rewriteBehindTheBack(s: SourceRecord, name: string): Promise<void> {
  await redis.set(keys.source(s.user_id, s.id), JSON.stringify({ ...s, name }));
}

const component = (id: string): ComponentRecord => ({
  id,
  user_id: "u_x",
  key: null,
  code: "export default {}",
  code_hash: "h",
  name: "c",
  version: "0.0.1",
  description: null,
  configurable_props: [],
  dedupe: null,
  hooks: [],
  component_url: null,
  created_at: 1,
  updated_at: 1,
});

describe("SourceCache", () => {
  it("answers a source and its endpoint token from memory", async () => {
    const a = process_();
    await a.cache.start();
    expect(a.cache.isLive()).toBe(true);
    const s = sourceRecord("u_sc1");
    await a.sources.create(s, 1);
    expect((await a.cache.get("u_sc1", s.id))?.name).toBe(s.name);
    expect(await a.cache.endpoint(s.endpoint_token as string)).toEqual({ userId: "u_sc1", sourceId: s.id });
    await rewriteBehindTheBack(s, "behind");
    await redis.hdel(keys.endpoints(), s.endpoint_token as string);
    expect((await a.cache.get("u_sc1", s.id))?.name).toBe(s.name);
    expect(await a.cache.endpoint(s.endpoint_token as string)).toEqual({ userId: "u_sc1", sourceId: s.id });
  });

  it("sees an update (deactivation) at once in the updating process and on the message in the others", async () => {
    const a = process_();
    const b = process_();
    await Promise.all([a.cache.start(), b.cache.start()]);
    const s = sourceRecord("u_sc2");
    await a.sources.create(s, 1);
    expect((await a.cache.get("u_sc2", s.id))?.active).toBe(true);
    expect((await b.cache.get("u_sc2", s.id))?.active).toBe(true);

    await a.sources.save({ ...s, active: false }, 0);
    expect((await a.cache.get("u_sc2", s.id))?.active).toBe(false);
    await waitFor(async () => (await b.cache.get("u_sc2", s.id))?.active === false, { what: "process b to see the deactivation" });
  });

  it("forgets a deleted source, and every source, component and plan of a deleted user", async () => {
    const a = process_();
    const b = process_();
    await Promise.all([a.cache.start(), b.cache.start()]);
    const gone = sourceRecord("u_sc3");
    await a.sources.create(gone, 1);
    expect(await b.cache.get("u_sc3", gone.id)).toBeDefined();
    await a.sources.delete(gone);
    expect(await a.cache.get("u_sc3", gone.id)).toBeUndefined();
    await waitFor(async () => (await b.cache.get("u_sc3", gone.id)) === undefined, { what: "process b to drop the deleted source" });

    const { user } = await a.users.create({ username: `u${randomBytes(4).toString("hex")}`, email: "a@example.com", plan: "free" });
    const other = sourceRecord("u_sc3b");
    await a.sources.create(other, 1);
    expect(await b.cache.get("u_sc3b", other.id)).toBeDefined();
    let loads = 0;
    const loadComponent = async () => {
      loads++;
      return component("sc_1");
    };
    const loadPlan = async () => {
      loads++;
      return "free" as const;
    };
    // Components are kept without their code.
    expect(await b.cache.component(user.id, "sc_1", loadComponent)).not.toHaveProperty("code");
    expect(await b.cache.plan(user.id, loadPlan)).toBe("free");
    await b.cache.component(user.id, "sc_1", loadComponent);
    await b.cache.plan(user.id, loadPlan);
    expect(loads).toBe(2);
    await a.users.delete(user.id);
    await waitFor(
      async () => {
        loads = 0;
        await b.cache.component(user.id, "sc_1", loadComponent);
        await b.cache.plan(user.id, loadPlan);
        return loads === 2;
      },
      { what: "process b to drop the deleted user's component and plan" },
    );
    // Another user's source stays cached.
    await rewriteBehindTheBack(other, "behind");
    expect((await b.cache.get("u_sc3b", other.id))?.name).toBe(other.name);
  });

  it("reads Redis while its subscriber is down", async () => {
    const a = process_();
    await a.cache.start();
    const s = sourceRecord("u_sc4");
    await a.sources.create(s, 1);
    await a.cache.get("u_sc4", s.id);
    await a.subscriber.disconnect(true);
    await waitFor(async () => !a.cache.isLive(), { what: "the cache to notice the lost subscription" });
    await rewriteBehindTheBack(s, "while-down");
    expect((await a.cache.get("u_sc4", s.id))?.name).toBe("while-down");
    await a.cache.stop();
  });
});
