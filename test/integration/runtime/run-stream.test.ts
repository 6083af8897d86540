import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { QUEUES } from "../../../src/queue/catalog.js";
import { createKeys } from "../../../src/store/keys.js";
import { runStreamLength } from "../../../src/store/run-stream.js";
import { client, type TestDaemon, startTestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";
import { connectRedis } from "../../helpers/redis.js";
import { createSource, events, expectStatus } from "./support.js";

/**
 * Queued source runs travel through the run stream (docs/decisions.md "Source runs from a
 * stream"): one entry per accepted request, run once, acknowledged and deleted when settled; at
 * most SOURCE_RUN_CONCURRENCY at once; past SOURCE_RUN_STREAM_PER_USER of a user's entries the
 * rest are parked and moved in as those settle. No BullMQ job is made for any of them.
 */

/** A loopback server that holds each request `holdMs` and counts those in flight (the most at once). */
async function startHoldingServer(holdMs: number) {
  let inFlight = 0;
  let max = 0;
  let arrivals = 0;
  const server: Server = createServer((_req, res) => {
    arrivals++;
    max = Math.max(max, ++inFlight);
    setTimeout(() => {
      inFlight--;
      res.end("ok");
    }, holdMs);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    maxInFlight: () => max,
    arrivals: () => arrivals,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const EMIT_N = `module.exports = {
  name: "Emit n", version: "0.0.1", props: { http: "$.interface.http" },
  async run(event) { this.$emit({ n: event.body.n }); },
};`;

const holding = (url: string) => `module.exports = {
  name: "Holding", version: "0.0.1", props: { http: "$.interface.http" },
  async run(event) { await fetch(${JSON.stringify(url)}); this.$emit({ n: event.body.n }); },
};`;

describe("source runs from the run stream", () => {
  let td: TestDaemon;
  let redis: Redis;
  let queue: Queue;
  const open: { close(): Promise<void> }[] = [];

  beforeAll(async () => {
    td = await startTestDaemon({ SOURCE_RUN_CONCURRENCY: "2", SOURCE_RUN_STREAM_PER_USER: "3", SOURCE_HTTP_RATE_PER_SECOND: "1000" });
    redis = connectRedis();
    queue = new Queue(QUEUES.sourceRun, { connection: redis.duplicate(), prefix: createKeys(td.prefix).queuePrefix("source-run") });
  });

  afterEach(async () => {
    for (const s of open.splice(0)) await s.close();
  });

  afterAll(async () => {
    await queue?.close();
    redis?.disconnect();
    await td?.close();
  });

  const keys = () => createKeys(td.prefix);
  const queuedJobs = async () => Object.values(await queue.getJobCounts()).reduce((a, b) => a + (b ?? 0), 0);
  /** Each shard's run-stream key of one kind. */
  const everyShard = <T>(key: (shard: number) => string, read: (key: string) => Promise<T>) =>
    Promise.all(Array.from({ length: keys().shards }, (_, i) => read(key(i))));
  /** Nothing left in any shard: no entry in the stream, no parked run, no user counted. */
  const drained = async () => {
    const k = keys();
    const sizes = [
      await runStreamLength(redis, k),
      ...(await everyShard(k.shardRunParked, (key) => redis.hlen(key))),
      ...(await everyShard(k.shardRunParkedEnds, (key) => redis.hlen(key))),
      ...(await everyShard(k.shardRunCounts, (key) => redis.hlen(key))),
    ];
    return sizes.every((n) => n === 0);
  };

  it("runs each accepted request once, with no BullMQ job, and leaves nothing behind", async () => {
    const u = await td.createUser("paid");
    const s = await createSource(u.api, EMIT_N);
    const http = client(td.url);
    const N = 30;
    for (const batch of [0, 10, 20]) {
      const replies = await Promise.all(
        Array.from({ length: 10 }, (_, i) => http.post(s.configured_props.http.endpoint_url, { json: { n: batch + i } })),
      );
      for (const r of replies) expectStatus(r, 200);
    }
    await waitFor(async () => (await events(u.api, s.id)).length >= N, { timeoutMs: 30_000, what: `${N} events` });
    await waitFor(drained, { timeoutMs: 10_000, what: "the run stream to drain" });
    const ns = (await events(u.api, s.id)).map((e) => e.event.n).sort((a: number, b: number) => a - b);
    expect(ns).toEqual(Array.from({ length: N }, (_, i) => i));
    expect(await events(u.api, s.id, "$errors")).toEqual([]);
    expect(await queuedJobs(), "source-run jobs in BullMQ").toBe(0);
  });

  it("runs at most SOURCE_RUN_CONCURRENCY at once and keeps at most SOURCE_RUN_STREAM_PER_USER of a user's runs in the stream, parking the rest in order", async () => {
    const slow = await startHoldingServer(300);
    open.push(slow);
    const u = await td.createUser("paid");
    const s = await createSource(u.api, holding(slow.url));
    const http = client(td.url);
    const N = 12;
    for (let n = 0; n < N; n++) expectStatus(await http.post(s.configured_props.http.endpoint_url, { json: { n } }), 200);
    let maxInStream = 0;
    let maxParked = 0;
    await waitFor(
      async () => {
        const shard = keys().shardOf(u.id);
        maxInStream = Math.max(maxInStream, Number((await redis.hget(keys().shardRunCounts(shard), u.id)) ?? 0));
        maxParked = Math.max(maxParked, await redis.hlen(keys().shardRunParked(shard)));
        return (await events(u.api, s.id)).length >= N;
      },
      { timeoutMs: 60_000, intervalMs: 50, what: `${N} runs` },
    );
    await waitFor(drained, { timeoutMs: 10_000, what: "the run stream to drain" });
    expect(slow.maxInFlight()).toBeLessThanOrEqual(2);
    expect(slow.maxInFlight()).toBeGreaterThanOrEqual(1);
    expect(slow.arrivals()).toBe(N);
    expect(maxInStream).toBeLessThanOrEqual(3);
    expect(maxInStream).toBeGreaterThanOrEqual(1);
    expect(maxParked, "runs past the user's share were parked").toBeGreaterThan(0);
    // Parked runs move in oldest first: with 2 runs at once, a run starts at most 2 places early.
    const order = (await events(u.api, s.id)).map((e) => e.event.n);
    expect([...order].sort((a: number, b: number) => a - b)).toEqual(Array.from({ length: N }, (_, i) => i));
    for (const [at, n] of order.entries()) expect(Math.abs(n - at), `run ${n} ended ${at}th`).toBeLessThanOrEqual(3);
    expect(await queuedJobs(), "source-run jobs in BullMQ").toBe(0);
  });

  it("runs what an earlier version left in its single run stream, entries and parked runs alike", async () => {
    const u = await td.createUser("paid");
    const s = await createSource(u.api, EMIT_N);
    const k = keys();
    const job = (n: number) =>
      JSON.stringify({
        kind: "http",
        userId: u.id,
        sourceId: s.id,
        request: { method: "POST", path: "/", query: {}, headers: { "content-type": "application/json" }, bodyRaw: JSON.stringify({ n }) },
        acceptedAtMs: Date.now(),
      });
    // As a process of the earlier version would have left them (the running daemon adopts them
    // within its take-over interval: the claim idle time's half, at most 5 s).
    await redis.xadd(k.legacyRunStream(), "*", "u", u.id, "j", job(0));
    await redis.xadd(k.legacyRunStream(), "*", "u", u.id, "j", job(1));
    await redis.hset(k.legacyRunParked(), `${u.id} 1`, job(2));
    await redis.hset(k.legacyRunParkedEnds(), `h ${u.id}`, 0, `t ${u.id}`, 1);
    await waitFor(async () => (await events(u.api, s.id)).length >= 3, { timeoutMs: 20_000, what: "the 3 runs left behind" });
    expect((await events(u.api, s.id)).map((e) => e.event.n).sort()).toEqual([0, 1, 2]);
    await waitFor(drained, { timeoutMs: 10_000, what: "the run streams to drain" });
    expect(await redis.xlen(k.legacyRunStream())).toBe(0);
    expect(await redis.exists(k.legacyRunParked(), k.legacyRunParkedEnds())).toBe(0);
  });
});
