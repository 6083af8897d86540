import { randomBytes } from "node:crypto";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { planReplay, ReplayDriver } from "../../../src/delivery/bulk-replay.js";
import { DeliveryJobQueue } from "../../../src/delivery/jobs.js";
import { createLogger } from "../../../src/observability/logger.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import { AttemptLog, type DeliveryRecord, type ReadRecord } from "../../../src/store/attempt-log.js";
import { createKeys, type Keys } from "../../../src/store/keys.js";
import { ReplayStore } from "../../../src/store/replays.js";
import { seedDeliveries } from "../../helpers/attempt-log-seed.js";
import { connectRedis, dropPrefix, testPrefix } from "../../helpers/redis.js";

/**
 * The bulk replay driver's lease expiring while its holder still runs (a stalled process), against
 * real Redis and a real BullMQ queue (no worker: the jobs stay queued, to be counted). The first
 * driver is held at one step of a chunk; its lease is dropped, as if it had expired; a second
 * driver takes over and queues the replay; then the first one goes on. docs/decisions.md "Bulk
 * replay": each delivery is still claimed once and has one job.
 */

const USER = "u_takeover";
const WEBHOOK = "wh_takeover";
const N = 30;
const logger = createLogger("silent");

let redis: Redis;
let prefix: string;
let keys: Keys;
let queue: Queue;
beforeAll(() => {
  redis = connectRedis();
});
afterAll(() => redis.disconnect());
afterEach(async () => {
  await queue?.close();
  await dropPrefix(redis, prefix);
});

/** Resolves once `release` was called; `reached` resolves when the first caller got there. */
function pausePoint() {
  let release!: () => void;
  let reached!: () => void;
  const released = new Promise<void>((r) => {
    release = r;
  });
  const wasReached = new Promise<void>((r) => {
    reached = r;
  });
  const wait = (): Promise<void> => {
    reached();
    return released;
  };
  return { release, reached: wasReached, wait };
}

type Pause = ReturnType<typeof pausePoint>;

/** An attempt log whose claims wait at `pause` (a driver stalled between reading and claiming). */
class PausedClaims extends AttemptLog {
  constructor(
    k: Keys,
    private readonly pause: Pause,
  ) {
    super(redis, k, 100_000, Date.now);
  }
  override async claim(read: ReadRecord, next: DeliveryRecord): Promise<boolean> {
    await this.pause.wait();
    return super.claim(read, next);
  }
}

/** A job queue whose adds wait at `pause` (a driver stalled between claiming and queueing). */
class PausedAdds extends DeliveryJobQueue {
  constructor(
    q: Queue,
    private readonly pause: Pause,
  ) {
    super(q, 4);
  }
  override async add(...args: Parameters<DeliveryJobQueue["add"]>): Promise<void> {
    await this.pause.wait();
    return super.add(...args);
  }
}

function driver(owner: string, replays: ReplayStore, log: AttemptLog, jobs: DeliveryJobQueue, clock: { ms: number }) {
  return new ReplayDriver({ replays, log, jobs, queue, ratePerSecond: 100, owner, logger, now: () => clock.ms });
}

describe("bulk replay driver whose lease expires while it still runs", () => {
  for (const step of ["claim", "add"] as const) {
    it(`queues each delivery once when a second driver takes over while the first waits to ${step}`, async () => {
      prefix = testPrefix();
      keys = createKeys(prefix);
      queue = new Queue(QUEUES.delivery, { connection: redis.duplicate(), prefix: keys.queuePrefix("delivery") });
      await redis.set(keys.webhook(USER, WEBHOOK), "{}");
      const t0 = Date.now() - 3600_000;
      const tag = randomBytes(4).toString("hex");
      const list = Array.from({ length: N }, (_, i) => ({ id: `d_${tag}${i}`, atMs: t0 + i, status: "failed" as const }));
      const log = await seedDeliveries(redis, prefix, USER, WEBHOOK, list);
      const replays = new ReplayStore({ redis, keys, now: Date.now, randomBytes });
      const r = await planReplay({ log, replays }, USER, WEBHOOK, {});
      expect(r.matched).toBe(N);

      const clock = { ms: Date.now() };
      const pause = pausePoint();
      const plain = new DeliveryJobQueue(queue, 4);
      const first =
        step === "claim"
          ? driver("first", replays, new PausedClaims(keys, pause), plain, clock)
          : driver("first", replays, log, new PausedAdds(queue, pause), clock);
      const second = driver("second", replays, log, plain, clock);

      clock.ms += 1000; // a second's budget: the whole plan in one chunk
      const stalled = first.tick();
      await pause.reached;
      // The first driver's lease runs out while it is held.
      await redis.del(keys.replayLease());
      clock.ms += 1000;
      await second.tick();
      expect(await replays.get(USER, r.id)).toMatchObject({ cursor: N, queued: N });
      pause.release();
      await stalled;
      clock.ms += 1000;
      await second.tick(); // nothing left: the replay leaves the registry

      const state = await replays.get(USER, r.id);
      expect(state).toMatchObject({ matched: N, cursor: N, queued: N, skipped: 0 });
      expect(await replays.queueingOf(USER, 10)).toEqual([]);
      expect(await replays.turns(10)).toEqual([]);
      const jobs = await queue.getJobs(["prioritized", "waiting", "delayed"]);
      expect(jobs.map((j) => j.id).sort()).toEqual(list.map((d) => `${d.id}-r1`).sort());
      for (const d of list) expect((await log.get(USER, d.id))?.replays, d.id).toBe(1);
      await Promise.all([first.close(), second.close()]);
    });
  }
});
