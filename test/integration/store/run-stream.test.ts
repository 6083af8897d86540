import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { createMetrics } from "../../../src/observability/metrics.js";
import { QueueMonitor } from "../../../src/observability/queue-monitor.js";
import type { RequestGate } from "../../../src/store/request-gate.js";
import { RUN_GROUP, RunStream, runStreamLength } from "../../../src/store/run-stream.js";
import { keySpacePerTest } from "../../helpers/redis.js";

/**
 * The run streams' scripts against real Redis (docs/decisions.md "Source runs from a stream"): one
 * stream per shard, a user's share of its shard's stream, parked runs moved in oldest first as
 * the user's entries settle, ids taken once, an entry acknowledged twice counted out once,
 * take-over of idle entries, a queued request's rates, quota and run in one step, and the adoption
 * of what the one stream of earlier versions still holds.
 */

const space = keySpacePerTest();
const job = (userId: string, n: number) => JSON.stringify({ kind: "timer", userId, sourceId: `dc_${n}` });
const sourcesOf = (entries: readonly { json: string }[]) => entries.map((e) => JSON.parse(e.json).sourceId);

/** A run stream that reads on the test's connection (one read group of every shard on one node). */
function stream(perUser: number): RunStream {
  return new RunStream(space.redis, space.keys, perUser, Date.now, { blocking: space.redis });
}
const read = (s: RunStream, consumer: string, count: number) => {
  const [group] = s.readGroups();
  if (!group) throw new Error("no read group");
  return s.read(group, consumer, count, 10);
};
/** A user id whose data lives in `shard`. */
function userIn(shard: number, tag = "a"): string {
  for (let n = 0; ; n++) if (space.keys.shardOf(`u_${tag}${n}`) === shard) return `u_${tag}${n}`;
}

describe("run stream", () => {
  it("keeps a user's share in its shard's stream, parks the rest in order, and moves them in as the user's entries settle", async () => {
    const s = stream(2);
    await s.ensureGroup();
    const a = userIn(3);
    const b = userIn(3, "b");
    const statuses = await s.add([0, 1, 2, 3].map((n) => ({ userId: a, json: job(a, n) })));
    expect(statuses).toEqual(["added", "added", "parked", "parked"]);
    // Another user has a share of their own.
    expect(await s.add([{ userId: b, json: job(b, 9) }])).toEqual(["added"]);
    expect(await space.redis.xlen(space.keys.shardRuns(3))).toBe(3);

    const first = await read(s, "c1", 10);
    expect(sourcesOf(first)).toEqual(["dc_0", "dc_1", "dc_9"]);
    // dc_0 settles: the oldest parked run (dc_2) takes its place; a new run queues behind dc_3.
    await s.ack(first.slice(0, 1));
    expect(sourcesOf(await read(s, "c1", 10))).toEqual(["dc_2"]);
    expect(await s.add([{ userId: a, json: job(a, 4) }])).toEqual(["parked"]);
    await s.ack(first); // dc_1 and dc_9 settle (dc_0 again: nothing happens)
    expect(sourcesOf(await read(s, "c1", 10))).toEqual(["dc_3"]);
    expect(await space.redis.hget(space.keys.shardRunCounts(3), a)).toBe("2");
    expect(await space.redis.hget(space.keys.shardRunCounts(3), b)).toBeNull();
    expect(await space.redis.hlen(space.keys.shardRunParked(3))).toBe(1);
  });

  it("puts each user's runs in the stream of the user's shard, and one read takes them from every shard", async () => {
    const s = stream(10);
    await s.ensureGroup();
    const users = [0, 5, 15].map((shard) => userIn(shard));
    expect(await s.add(users.map((u, n) => ({ userId: u, json: job(u, n) })))).toEqual(["added", "added", "added"]);
    for (const [n, shard] of [0, 5, 15].entries()) {
      const [only] = await space.redis.xrange(space.keys.shardRuns(shard), "-", "+");
      expect(only?.[1]).toEqual(["u", users[n], "j", job(users[n] as string, n)]);
    }
    const got = await read(s, "c1", 10);
    expect(sourcesOf(got)).toEqual(["dc_0", "dc_1", "dc_2"]);
    expect(got.map((e) => e.entryId.split("/")[0])).toEqual(["0", "5", "15"]);
    await s.ack(got);
    expect(await runStreamLength(space.redis, space.keys)).toBe(0);
    for (const shard of [0, 5, 15]) expect(await space.redis.hlen(space.keys.shardRunCounts(shard))).toBe(0);
  });

  it("adds a run with an id once, however often it is offered", async () => {
    const s = stream(100);
    await s.ensureGroup();
    const runs = [1, 2].map((n) => ({ id: `run_${n}`, userId: "u_a", json: job("u_a", n) }));
    expect(await s.add(runs)).toEqual(["added", "added"]);
    expect(await s.add([...runs, { userId: "u_a", json: job("u_a", 3) }])).toEqual(["duplicate", "duplicate", "added"]);
    expect(await runStreamLength(space.redis, space.keys)).toBe(3);
  });

  it("counts an entry out once when two consumers settle it, and takes over idle entries", async () => {
    const s = stream(1);
    await s.ensureGroup();
    await s.add([0, 1].map((n) => ({ userId: "u_a", json: job("u_a", n) })));
    const shard = space.keys.shardOf("u_a");
    const [held] = await read(s, "dead", 1);
    if (!held) throw new Error("nothing read");
    await new Promise((r) => setTimeout(r, 50));
    const { entries } = await s.takeOverRuns(shard, "alive", 20, "0-0", 10);
    expect(entries.map((e) => e.entryId)).toEqual([held.entryId]);
    await s.ack([held]);
    await s.ack([held]); // the slow consumer settles it too: no second count out, no second move
    expect(sourcesOf(await read(s, "alive", 10))).toEqual(["dc_1"]);
    expect(await space.redis.hget(space.keys.shardRunCounts(shard), "u_a")).toBe("1");
    expect(await space.redis.hlen(space.keys.shardRunParked(shard))).toBe(0);
  });

  it("heals counts that drifted: once the stream is empty, parked runs move in", async () => {
    const s = stream(1);
    await s.ensureGroup();
    await s.add([0, 1, 2].map((n) => ({ userId: "u_a", json: job("u_a", n) })));
    const shard = space.keys.shardOf("u_a");
    expect(await s.heal()).toBe(0); // entries in the stream: nothing to heal
    // The user's only entry deleted from outside: the count says 1, nothing would ever move in.
    const [only] = await space.redis.xrange(space.keys.shardRuns(shard), "-", "+");
    await space.redis.xdel(space.keys.shardRuns(shard), only?.[0] ?? "");
    expect(await s.heal()).toBe(1);
    expect(sourcesOf(await read(s, "c1", 10))).toEqual(["dc_1"]);
    expect(await space.redis.hget(space.keys.shardRunCounts(shard), "u_a")).toBe("1");
    expect(await space.redis.hlen(space.keys.shardRunParked(shard))).toBe(1);
  });

  it("accepts a queued request in one step: the run is added only when the rates and the quota let it through", async () => {
    const s = stream(1);
    await s.ensureGroup();
    const k = space.keys;
    const usageKey = k.usage("u_a", "2026-11-26");
    const gate: RequestGate = {
      rate: { key: k.sourceRate("u_a", "dc_1"), perSecond: 1, burst: 2 },
      charge: { key: k.ingressRate("u_a"), perSecond: 1, burst: 3, cost: 1 },
      quota: { usageKey, invocations: 10, computeMs: 1000 },
    };
    expect(await s.accept("u_a", job("u_a", 0), gate)).toEqual({ admitted: true, status: "added" });
    expect(await s.accept("u_a", job("u_a", 1), gate)).toEqual({ admitted: true, status: "parked" });
    // The source's burst (2) is spent: refused with the wait, nothing added or parked.
    const refused = await s.accept("u_a", job("u_a", 2), gate);
    expect(refused).toMatchObject({ admitted: false, chargeWait: 0, quota: 0 });
    expect(refused.admitted === false && refused.rateWait).toBeGreaterThan(0);
    // The user's ingress rate refuses once the source has room but the user's bucket is spent.
    const other: RequestGate = { ...gate, rate: { key: k.sourceRate("u_a", "dc_2"), perSecond: 100, burst: 100 } };
    expect(await s.accept("u_a", job("u_a", 3), other)).toEqual({ admitted: true, status: "parked" });
    const charged = await s.accept("u_a", job("u_a", 4), other);
    expect(charged).toMatchObject({ admitted: false, rateWait: 0, quota: 0 });
    // The quota: a free user whose day counters reached a limit.
    const unlimited: RequestGate = { rate: other.rate, ...(gate.quota ? { quota: gate.quota } : {}) };
    await space.redis.hset(usageKey, "invocations", 10);
    expect(await s.accept("u_a", job("u_a", 5), unlimited)).toMatchObject({ admitted: false, quota: 1 });
    await space.redis.hset(usageKey, "invocations", 0, "compute_ms", 1000);
    expect(await s.accept("u_a", job("u_a", 6), unlimited)).toMatchObject({ admitted: false, quota: 2 });
    // Paid (no quota in the gate): let through whatever the counters say.
    expect(await s.accept("u_a", job("u_a", 7), { rate: other.rate })).toEqual({ admitted: true, status: "parked" });
    const shard = k.shardOf("u_a");
    expect(await space.redis.xlen(k.shardRuns(shard))).toBe(1);
    const parked = await space.redis.hvals(k.shardRunParked(shard));
    expect(parked.map((j) => JSON.parse(j).sourceId).sort()).toEqual(["dc_1", "dc_3", "dc_7"]);
  });

  it("adopts what the one run stream of earlier versions holds: entries (pending ones too) and parked runs, once", async () => {
    const k = space.keys;
    const legacy = k.legacyRunStream();
    await space.redis.xgroup("CREATE", legacy, RUN_GROUP, "0", "MKSTREAM");
    for (const n of [0, 1, 2]) await space.redis.xadd(legacy, "*", "u", "u_a", "j", job("u_a", n));
    await space.redis.xadd(legacy, "*", "u", "u_b", "j", job("u_b", 3));
    // One entry read by a process of the earlier version (pending), parked runs of u_a after them.
    await space.redis.xreadgroup("GROUP", RUN_GROUP, "old", "COUNT", 1, "STREAMS", legacy, ">");
    await space.redis.hset(k.legacyRunParked(), "u_a 2", job("u_a", 5), "u_a 1", job("u_a", 4));
    await space.redis.hset(k.legacyRunParkedEnds(), "h u_a", 0, "t u_a", 2);
    await space.redis.hset(k.legacyRunStreamCounts(), "u_a", 3, "u_b", 1);

    const s = stream(100);
    await s.ensureGroup();
    expect(await s.adoptLegacy()).toBe(6);
    expect(await space.redis.xlen(legacy)).toBe(0);
    for (const key of [k.legacyRunParked(), k.legacyRunParkedEnds(), k.legacyRunStreamCounts()])
      expect(await space.redis.exists(key)).toBe(0);
    const got = await read(s, "c1", 100);
    const ofUser = (u: string) => sourcesOf(got.filter((e) => e.userId === u));
    expect(ofUser("u_a")).toEqual(["dc_0", "dc_1", "dc_2", "dc_4", "dc_5"]);
    expect(ofUser("u_b")).toEqual(["dc_3"]);
    // Nothing left to adopt, and a redo after a crash adds nothing twice.
    expect(await s.adoptLegacy()).toBe(0);
    const id = await space.redis.xadd(legacy, "*", "u", "u_a", "j", job("u_a", 9));
    // An adoption cut by a crash after the add, before the delete: done again, it adds nothing twice.
    await s.add([{ id: `legacy:${id}`, userId: "u_a", json: job("u_a", 9) }]);
    expect(await s.adoptLegacy()).toBe(1);
    expect(sourcesOf(await read(s, "c1", 100))).toEqual(["dc_9"]);
  });

  it('is sampled by the queue monitor as the queue "runs": parked and unread runs wait, read ones are active', async () => {
    const s = stream(2);
    await s.ensureGroup();
    await s.add([0, 1, 2, 3, 4].map((n) => ({ userId: "u_a", json: job("u_a", n) })));
    await read(s, "c1", 1);
    const registry = new Registry();
    await new QueueMonitor([], createMetrics(registry), 60_000, undefined, s).sample();
    const depth = (await registry.getSingleMetric("tributary_queue_depth")?.get())?.values ?? [];
    const of = (state: string) => depth.find((v) => v.labels.queue === "runs" && v.labels.state === state)?.value;
    expect(of("waiting")).toBe(4);
    expect(of("active")).toBe(1);
  });
});
