import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { createMetrics } from "../../../src/observability/metrics.js";
import { QueueMonitor } from "../../../src/observability/queue-monitor.js";
import { RunStream } from "../../../src/store/run-stream.js";
import { keySpacePerTest } from "../../helpers/redis.js";

/**
 * The run stream's scripts against real Redis (docs/decisions.md "Source runs from a stream"): a
 * user's share of the stream, parked runs moved in oldest first as the user's entries settle,
 * ids taken once, an entry acknowledged twice counted out once, take-over of idle entries.
 */

const space = keySpacePerTest();
const job = (userId: string, n: number) => JSON.stringify({ kind: "timer", userId, sourceId: `dc_${n}` });
const sourcesOf = (entries: readonly { json: string }[]) => entries.map((e) => JSON.parse(e.json).sourceId);

describe("run stream", () => {
  it("keeps a user's share in the stream, parks the rest in order, and moves them in as the user's entries settle", async () => {
    const s = new RunStream(space.redis, space.keys, 2);
    await s.ensureGroup();
    const statuses = await s.add([0, 1, 2, 3].map((n) => ({ userId: "u_a", json: job("u_a", n) })));
    expect(statuses).toEqual(["added", "added", "parked", "parked"]);
    // Another user has a share of their own.
    expect(await s.add([{ userId: "u_b", json: job("u_b", 9) }])).toEqual(["added"]);

    const first = await s.read(space.redis, "c1", 10, 10);
    expect(sourcesOf(first)).toEqual(["dc_0", "dc_1", "dc_9"]);
    // dc_0 settles: the oldest parked run (dc_2) takes its place; a new run queues behind dc_3.
    await s.ack(first.slice(0, 1));
    expect(sourcesOf(await s.read(space.redis, "c1", 10, 10))).toEqual(["dc_2"]);
    expect(await s.add([{ userId: "u_a", json: job("u_a", 4) }])).toEqual(["parked"]);
    await s.ack(first); // dc_1 and dc_9 settle (dc_0 again: nothing happens)
    expect(sourcesOf(await s.read(space.redis, "c1", 10, 10))).toEqual(["dc_3"]);
    expect(await space.redis.hget(space.keys.runStreamCounts(), "u_a")).toBe("2");
    expect(await space.redis.hget(space.keys.runStreamCounts(), "u_b")).toBeNull();
    expect(await space.redis.hlen(space.keys.runParked())).toBe(1);
  });

  it("adds a run with an id once, however often it is offered", async () => {
    const s = new RunStream(space.redis, space.keys, 100);
    await s.ensureGroup();
    const runs = [1, 2].map((n) => ({ id: `run_${n}`, userId: "u_a", json: job("u_a", n) }));
    expect(await s.add(runs)).toEqual(["added", "added"]);
    expect(await s.add([...runs, { userId: "u_a", json: job("u_a", 3) }])).toEqual(["duplicate", "duplicate", "added"]);
    expect(await space.redis.xlen(space.keys.runStream())).toBe(3);
  });

  it("counts an entry out once when two consumers settle it, and takes over idle entries", async () => {
    const s = new RunStream(space.redis, space.keys, 1);
    await s.ensureGroup();
    await s.add([0, 1].map((n) => ({ userId: "u_a", json: job("u_a", n) })));
    const [held] = await s.read(space.redis, "dead", 1, 10);
    if (!held) throw new Error("nothing read");
    await new Promise((r) => setTimeout(r, 50));
    const { entries } = await s.takeOver("alive", 20, "0-0", 10);
    expect(entries.map((e) => e.entryId)).toEqual([held.entryId]);
    await s.ack([held]);
    await s.ack([held]); // the slow consumer settles it too: no second count out, no second move
    expect(sourcesOf(await s.read(space.redis, "alive", 10, 10))).toEqual(["dc_1"]);
    expect(await space.redis.hget(space.keys.runStreamCounts(), "u_a")).toBe("1");
    expect(await space.redis.hlen(space.keys.runParked())).toBe(0);
  });

  it("heals counts that drifted: once the stream is empty, parked runs move in", async () => {
    const s = new RunStream(space.redis, space.keys, 1);
    await s.ensureGroup();
    await s.add([0, 1, 2].map((n) => ({ userId: "u_a", json: job("u_a", n) })));
    expect(await s.heal()).toBe(-1); // entries in the stream: nothing to heal
    // The user's only entry deleted from outside: the count says 1, nothing would ever move in.
    const [only] = await space.redis.xrange(space.keys.runStream(), "-", "+");
    await space.redis.xdel(space.keys.runStream(), only?.[0] ?? "");
    expect(await s.heal()).toBe(1);
    expect(sourcesOf(await s.read(space.redis, "c1", 10, 10))).toEqual(["dc_1"]);
    expect(await space.redis.hget(space.keys.runStreamCounts(), "u_a")).toBe("1");
    expect(await space.redis.hlen(space.keys.runParked())).toBe(1);
  });

  it('is sampled by the queue monitor as the queue "runs": parked and unread runs wait, read ones are active', async () => {
    const s = new RunStream(space.redis, space.keys, 2);
    await s.ensureGroup();
    await s.add([0, 1, 2, 3, 4].map((n) => ({ userId: "u_a", json: job("u_a", n) })));
    await s.read(space.redis, "c1", 1, 10);
    const registry = new Registry();
    await new QueueMonitor([], createMetrics(registry), 60_000, undefined, s).sample();
    const depth = (await registry.getSingleMetric("tributary_queue_depth")?.get())?.values ?? [];
    const of = (state: string) => depth.find((v) => v.labels.queue === "runs" && v.labels.state === state)?.value;
    expect(of("waiting")).toBe(4);
    expect(of("active")).toBe(1);
  });
});
