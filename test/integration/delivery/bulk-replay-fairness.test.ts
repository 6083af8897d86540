import { randomBytes } from "node:crypto";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { planReplay, ReplayDriver } from "../../../src/delivery/bulk-replay.js";
import { DeliveryJobQueue } from "../../../src/delivery/jobs.js";
import { createLogger } from "../../../src/observability/logger.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import type { AttemptLog } from "../../../src/store/attempt-log.js";
import { createKeys, type Keys } from "../../../src/store/keys.js";
import { ReplayStore } from "../../../src/store/replays.js";
import { type SeedDelivery, seedDeliveries } from "../../helpers/attempt-log-seed.js";
import { startTestDaemon, type Client, type TestDaemon } from "../../helpers/daemon.js";
import { createWebhook, NO_CIRCUIT } from "../../helpers/delivery-e2e.js";
import { startReceiver, type Receiver, waitFor } from "../../helpers/receiver.js";
import { connectRedis, dropPrefix, testPrefix } from "../../helpers/redis.js";

/**
 * Bulk replays of several users share REPLAY_RATE_PER_SECOND in turn (docs/decisions.md "Bulk
 * replay"): a user's small replay is queued within a few turns, however large another user's
 * replay asked before it. First come, first served, user B's replay of 5 waited for the whole of
 * user A's 300 (30 s at 10/s).
 */

const logger = createLogger("silent");
const redis: Redis = connectRedis();
afterAll(() => redis.disconnect());

/** `n` failed deliveries one ms apart, oldest first; ids unique across tests (BullMQ job ids are global). */
function failed(n: number): SeedDelivery[] {
  const t0 = Date.now() - 3600_000;
  const tag = randomBytes(4).toString("hex");
  return Array.from({ length: n }, (_, i) => ({ id: `d_${tag}${String(i).padStart(6, "0")}`, atMs: t0 + i, status: "failed" as const }));
}

describe("bulk replay driver between users", () => {
  let prefix: string;
  let keys: Keys;
  let queue: Queue;
  afterEach(async () => {
    await queue?.close();
    await dropPrefix(redis, prefix);
  });

  /** A driver on a clock of its own, at 10/s, whose queue never holds workers back (no worker runs here). */
  async function setUp() {
    prefix = testPrefix();
    keys = createKeys(prefix);
    queue = new Queue(QUEUES.delivery, { connection: redis.duplicate(), prefix: keys.queuePrefix("delivery") });
    const replays = new ReplayStore({ redis, keys, now: Date.now, randomBytes });
    const clock = { ms: Date.now() };
    const idle = { getPrioritizedCount: async () => 0 };
    const seeded = async (user: string, webhook: string, n: number): Promise<AttemptLog> => {
      await redis.set(keys.webhook(user, webhook), "{}");
      return seedDeliveries(redis, prefix, user, webhook, failed(n));
    };
    const log = await seeded("u_a", "wh_a", 300);
    await seeded("u_b", "wh_b", 5);
    const jobs = new DeliveryJobQueue(queue, 4);
    const drv = new ReplayDriver({ replays, log, jobs, queue: idle, ratePerSecond: 10, owner: "o", logger, now: () => clock.ms });
    /** Ticks (200 ms of the driver's clock each) until `done`, at most `max`; returns how many. */
    const tickUntil = async (done: () => Promise<boolean>, max: number): Promise<number> => {
      for (let i = 1; i <= max; i++) {
        clock.ms += 200;
        await drv.tick();
        if (await done()) return i;
      }
      return max + 1;
    };
    return { replays, log, drv, tickUntil };
  }

  it("shares the rate between users in turn: B's 5 are queued while A's 300 have had a handful", async () => {
    const { replays, log, drv, tickUntil } = await setUp();
    const a = await planReplay({ log, replays }, "u_a", "wh_a", {});
    // A's replay has a head start: a second of the rate to itself.
    await tickUntil(async () => false, 5);
    const b = await planReplay({ log, replays }, "u_b", "wh_b", {});
    expect([a.matched, b.matched]).toEqual([300, 5]);

    const ticks = await tickUntil(async () => (await replays.get("u_b", b.id))?.cursor === 5, 60);
    const [aState, bState] = await Promise.all([replays.get("u_a", a.id), replays.get("u_b", b.id)]);
    expect(bState).toMatchObject({ cursor: 5, queued: 5 });
    // At 10/s (2 a tick, one each), B's 5 take about 5 ticks; A queued about as many meanwhile.
    expect(ticks, "ticks until B's replay was queued").toBeLessThanOrEqual(8);
    expect(aState?.queued, "A's deliveries queued by then").toBeLessThanOrEqual(20);

    // B done, A has the rate to itself again, and B leaves the turns.
    const aTicks = await tickUntil(async () => (await replays.get("u_a", a.id))?.cursor === 300, 200);
    expect(aTicks).toBeLessThanOrEqual(160);
    await tickUntil(async () => false, 2);
    expect(await replays.turns(10)).toEqual([]);
    expect(await queue.getPrioritizedCount()).toBe(305);
    await drv.close();
  });

  it("drives replays registered by the previous version (one registry for every user)", async () => {
    const { replays, log, drv, tickUntil } = await setUp();
    const b = await planReplay({ log, replays }, "u_b", "wh_b", {});
    // As the previous version registered it: only in the one registry.
    await redis.del(keys.userReplaysQueueing("u_b"), keys.replayTurns());
    await redis.zadd(keys.replaysQueueing(), Date.now(), `u_b ${b.id}`);
    const ticks = await tickUntil(async () => (await replays.get("u_b", b.id))?.cursor === 5, 20);
    expect(ticks).toBeLessThanOrEqual(12);
    expect(await redis.zcard(keys.replaysQueueing())).toBe(0);
    await drv.close();
  });
});

describe("bulk replays of two users through the daemon", () => {
  let td: TestDaemon;
  let rx: Receiver;
  beforeAll(async () => {
    rx = await startReceiver(() => ({ status: 200 }));
    td = await startTestDaemon({ REPLAY_RATE_PER_SECOND: "10", ...NO_CIRCUIT });
  });
  afterAll(async () => {
    await td?.close();
    await rx?.close();
  });

  async function replay(api: Client, webhookId: string): Promise<{ id: string; matched: number }> {
    const res = await api.post(`/v1/webhooks/${webhookId}/deliveries/replay`, { json: {} });
    expect(res.status, res.text).toBe(202);
    return res.body.data;
  }
  const queued = async (api: Client, webhookId: string, id: string): Promise<number> => {
    const res = await api.get(`/v1/webhooks/${webhookId}/replays/${id}`);
    expect(res.status, res.text).toBe(200);
    return res.body.data.queued;
  };

  it("queues B's replay of 5 within seconds while A's replay of 300 goes on, at 10 deliveries a second", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    const wa = await createWebhook(a.api, rx.url("/a"));
    const wb = await createWebhook(b.api, rx.url("/b"));
    await seedDeliveries(redis, td.prefix, a.id, wa.id, failed(300));
    await seedDeliveries(redis, td.prefix, b.id, wb.id, failed(5));
    const ra = await replay(a.api, wa.id);
    await waitFor(async () => (await queued(a.api, wa.id, ra.id)) > 0, { timeoutMs: 10_000, what: "A's replay to start" });

    const askedAt = Date.now();
    const rb = await replay(b.api, wb.id);
    expect(rb.matched).toBe(5);
    await waitFor(async () => (await queued(b.api, wb.id, rb.id)) === 5, { timeoutMs: 12_000, intervalMs: 100, what: "B's replay queued" });
    const tookMs = Date.now() - askedAt;
    const aQueued = await queued(a.api, wa.id, ra.id);
    // First come, first served, B would wait for all 300 of A's (30 s at this rate).
    expect(tookMs, "B's replay fully queued after (ms)").toBeLessThan(6000);
    expect(aQueued, "A's deliveries queued by then").toBeLessThan(120);
    await rx.waitFor((r) => (r.to("/b").length >= 5 ? true : undefined), { timeoutMs: 10_000, what: "B's replayed deliveries" });
  });
});
