import { type JobSchedulerJson, Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QUEUES } from "../../../src/queue/catalog.js";
import { schedulerId } from "../../../src/runtime/timers.js";
import { createKeys } from "../../../src/store/keys.js";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";
import { connectRedis } from "../../helpers/redis.js";
import { type Json, expectStatus } from "./support.js";

/**
 * Timer sources through the whole daemon (SPEC §5 "Timers"): the scheduler role turns a source's
 * timer into a BullMQ job scheduler, the worker role runs each tick. TIMER_MIN_INTERVAL_SECONDS
 * is 1 in test daemons, so a timer can tick every second.
 */

/** Counts its runs in db and emits what each tick received. */
const TICKER = `module.exports = {
  key: "rt-ticker",
  name: "Runtime Ticker",
  version: "0.0.1",
  props: {
    db: "$.service.db",
    timer: { type: "$.interface.timer", default: { intervalSeconds: 1 } },
  },
  async run(event) {
    const n = (this.db.get("n") || 0) + 1;
    this.db.set("n", n);
    this.$emit({ n, timestamp: event.timestamp, interval_seconds: event.interval_seconds }, { id: String(n), summary: "tick " + n });
  },
};
`;

let redis: Redis;
let td: TestDaemon;
let timers: Queue;

beforeAll(async () => {
  redis = connectRedis();
  td = await startTestDaemon();
  timers = timersQueue(td.prefix);
});

afterAll(async () => {
  await timers?.close();
  await td?.close();
  redis?.disconnect();
});

/** The daemon's timers queue, read through BullMQ's own API. */
function timersQueue(prefix: string): Queue {
  return new Queue(QUEUES.timers, { connection: redis, prefix: createKeys(prefix).queuePrefix("timers") });
}

async function createTicker(api: Client, timer: Record<string, unknown> = { intervalSeconds: 1 }): Promise<Json> {
  const res = await api.post("/v1/sources", { json: { component_code: TICKER, configured_props: { timer } } });
  expectStatus(res, 200);
  return res.body.data;
}

/** The source's ticks, oldest first. */
async function ticks(api: Client, sourceId: string): Promise<Json[]> {
  const res = await api.get(`/v1/sources/${sourceId}/event_summaries`, { query: { limit: 100, expand: "event" } });
  expectStatus(res, 200);
  return [...res.body.data].reverse();
}

async function atLeastTicks(api: Client, sourceId: string, n: number, timeoutMs = 10_000): Promise<Json[]> {
  return waitFor(
    async () => {
      const t = await ticks(api, sourceId);
      return t.length >= n ? t : undefined;
    },
    { timeoutMs, intervalMs: 100, what: `${n} ticks of ${sourceId}` },
  );
}

/** Waits until the scheduler role has created the source's job scheduler, and returns it. */
async function schedulerCreated(q: Queue, sourceId: string): Promise<JobSchedulerJson> {
  return waitFor(() => q.getJobScheduler(schedulerId(sourceId)), { what: `the job scheduler of ${sourceId} to be created` });
}

/** Waits until the scheduler role has removed the source's job scheduler. */
async function schedulerRemoved(q: Queue, sourceId: string): Promise<void> {
  await waitFor(async () => (await q.getJobScheduler(schedulerId(sourceId))) === undefined, {
    what: `the job scheduler of ${sourceId} to be removed`,
  });
}

/** Ids of every timer job that exists for a source, whatever its state. */
async function tickJobs(q: Queue, sourceId: string): Promise<string[]> {
  const jobs = await q.getJobs(["completed", "failed", "active", "waiting", "delayed", "prioritized"]);
  return jobs.filter((j) => j?.data?.sourceId === sourceId).map((j) => String(j.id));
}

/**
 * Asserts that `probe` keeps returning `expected` for `ms`. Proving that nothing happens takes
 * time: the window is a few timer intervals, polled so a change fails at once.
 */
async function staysFor<T>(ms: number, expected: T, probe: () => Promise<T>, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    expect(await probe(), what).toEqual(expected);
    await new Promise((r) => setTimeout(r, 200));
  }
  expect(await probe(), what).toEqual(expected);
}

describe("interval timers", () => {
  it("tick with {timestamp, interval_seconds} and carry db state from run to run", async () => {
    const u = await td.createUser();
    const createdS = Math.floor(Date.now() / 1000);
    const s = await createTicker(u.api);
    expect(s.configured_props.timer).toEqual({ cron: null, interval_seconds: 1 });
    const scheduler = await schedulerCreated(timers, s.id);
    expect(scheduler.every).toBe(1000);

    const t = await atLeastTicks(u.api, s.id, 3);
    expect(t.slice(0, 3).map((e) => e.event.n)).toEqual([1, 2, 3]);
    expect(t.slice(0, 3).map((e) => e.metadata.summary)).toEqual(["tick 1", "tick 2", "tick 3"]);
    for (const e of t) {
      expect(e.event.interval_seconds).toBe(1);
      // Seconds, not milliseconds.
      expect(Number.isInteger(e.event.timestamp)).toBe(true);
      expect(e.event.timestamp).toBeGreaterThanOrEqual(createdS - 1);
      expect(e.event.timestamp).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000));
    }
    // Three ticks span at least one whole interval: the timer does not fire in a burst.
    expect((t[2].indexed_at_ms as number) - (t[0].indexed_at_ms as number)).toBeGreaterThanOrEqual(900);
  });

  it("stop while the source is disabled and resume, with the same db state, once it is enabled", async () => {
    const u = await td.createUser();
    const s = await createTicker(u.api);
    await atLeastTicks(u.api, s.id, 2);

    expectStatus(await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id, active: false } }), 200);
    await schedulerRemoved(timers, s.id);
    // A tick already running when the source was disabled may still land; wait for the queue to
    // hold nothing pending for this source, then count.
    await waitFor(async () => {
      const jobs = await timers.getJobs(["active", "waiting", "delayed", "prioritized"]);
      return !jobs.some((j) => j?.data?.sourceId === s.id);
    });
    const stopped = (await ticks(u.api, s.id)).length;
    await staysFor(2500, stopped, async () => (await ticks(u.api, s.id)).length, "tick count while disabled");

    expectStatus(await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id, active: true } }), 200);
    expect((await schedulerCreated(timers, s.id)).every).toBe(1000);
    const t = await atLeastTicks(u.api, s.id, stopped + 2);
    // db state survived: the count goes on from where it stopped, with no gap and no repeat.
    expect(t.map((e) => e.event.n)).toEqual(Array.from({ length: t.length }, (_, i) => i + 1));
  });

  it("stop for good when the source is deleted", async () => {
    const u = await td.createUser();
    const s = await createTicker(u.api);
    await atLeastTicks(u.api, s.id, 1);
    expectStatus(await u.api.del(`/v1/sources/${s.id}`), 204);
    await schedulerRemoved(timers, s.id);
    await waitFor(async () => {
      const jobs = await timers.getJobs(["active", "waiting", "delayed", "prioritized"]);
      return !jobs.some((j) => j?.data?.sourceId === s.id);
    });
    const jobs = await tickJobs(timers, s.id);
    await staysFor(2500, jobs, () => tickJobs(timers, s.id), "timer jobs after deletion");
    // No stray run wrote the deleted source's state back.
    expect(await redis.exists(createKeys(td.prefix).sourceDb(u.id, s.id))).toBe(0);
  });
});

describe("cron timers", () => {
  it("run a six-field cron every second, with interval_seconds null", async () => {
    const u = await td.createUser();
    const s = await createTicker(u.api, { cron: "* * * * * *" });
    expect(s.configured_props.timer).toEqual({ cron: "* * * * * *", interval_seconds: null });
    const scheduler = await schedulerCreated(timers, s.id);
    expect(scheduler.pattern).toBe("* * * * * *");
    expect(scheduler.tz).toBe("UTC");
    const t = await atLeastTicks(u.api, s.id, 2);
    expect(t.map((e) => e.event.n).slice(0, 2)).toEqual([1, 2]);
    for (const e of t) expect(e.event.interval_seconds).toBeNull();
    expect(t[1].event.timestamp).toBeGreaterThan(t[0].event.timestamp);
  });

  it("schedule a five-field cron for its next UTC occurrence", async () => {
    const u = await td.createUser();
    const s = await createTicker(u.api, { cron: "*/5 * * * *" });
    const scheduler = await schedulerCreated(timers, s.id);
    expect(scheduler.pattern).toBe("*/5 * * * *");
    const next = Number(scheduler.next);
    expect(next).toBeGreaterThan(Date.now() - 1000);
    expect(next).toBeLessThanOrEqual(Date.now() + 5 * 60_000);
    expect(next % (5 * 60_000)).toBe(0);
  });
});

describe("several scheduler instances on one Redis", () => {
  let first: TestDaemon;
  let second: TestDaemon;
  let q: Queue;

  beforeAll(async () => {
    first = await startTestDaemon();
    // The first instance takes the lock before the second one starts, so we know who leads.
    await waitFor(async () => (await redis.get(createKeys(first.prefix).schedulerLock())) ?? undefined, { what: "a scheduler leader" });
    second = await startTestDaemon({ REDIS_KEY_PREFIX: first.prefix });
    q = timersQueue(first.prefix);
  });

  afterAll(async () => {
    await q?.close();
    // `second` shares `first`'s prefix: closing `first` last drops the shared keys.
    await second?.close();
    await first?.close();
  });

  it("tick once per interval, not once per instance, and the other instance takes over when the leader stops", async () => {
    const lockKey = createKeys(first.prefix).schedulerLock();
    const leader = await redis.get(lockKey);
    const u = await first.createUser();
    const viaSecond = client(second.url, u.api_key);
    // Created through the instance that does not lead: the request reaches the leader through Redis.
    const res = await viaSecond.post("/v1/sources", {
      json: { component_code: TICKER, configured_props: { timer: { intervalSeconds: 1 } } },
    });
    expectStatus(res, 200);
    const s = res.body.data;

    const t = await atLeastTicks(u.api, s.id, 5, 15_000);
    const spanMs = (t[t.length - 1].indexed_at_ms as number) - (t[0].indexed_at_ms as number);
    // One tick per second over the span (plus one for the edges); two schedulers would double it.
    expect(t.length, `${t.length} ticks in ${spanMs} ms`).toBeLessThanOrEqual(Math.floor(spanMs / 1000) + 2);
    expect(new Set(t.map((e) => e.event.n)).size).toBe(t.length);
    expect(await redis.get(lockKey)).toBe(leader);

    // The leader stops; the other instance takes the lock, and ticks go on.
    await first.daemon.close();
    const successor = await waitFor(
      async () => {
        const v = await redis.get(lockKey);
        return v !== null && v !== leader ? v : undefined;
      },
      { what: "the second instance to take the scheduler lock" },
    );
    expect(successor).not.toBe(leader);
    const before = (await ticks(viaSecond, s.id)).length;
    await atLeastTicks(viaSecond, s.id, before + 2);

    // The new leader reconciles timers created from now on.
    const later = await viaSecond.post("/v1/sources", {
      json: { component_code: TICKER, configured_props: { timer: { intervalSeconds: 1 } } },
    });
    expectStatus(later, 200);
    await schedulerCreated(q, later.body.data.id);
    await atLeastTicks(viaSecond, later.body.data.id, 2);
  });
});
