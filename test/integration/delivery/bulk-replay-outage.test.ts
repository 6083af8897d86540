import { randomBytes } from "node:crypto";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { afterEach, describe, expect, it } from "vitest";
import { ReplayDriver } from "../../../src/delivery/bulk-replay.js";
import { DeliveryJobQueue } from "../../../src/delivery/jobs.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import { freePort, redisAnswersPing } from "../../../src/redis/embedded.js";
import { AttemptLog } from "../../../src/store/attempt-log.js";
import { createKeys } from "../../../src/store/keys.js";
import { ReplayStore } from "../../../src/store/replays.js";
import { collectingLogger } from "../../helpers/log-lines.js";
import { connectRedis, testPrefix } from "../../helpers/redis.js";
import { type RedisNodeProcess, spawnRedisNode } from "../../helpers/redis-node.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * The bulk replay driver through a Redis outage (a real redis-server, SIGKILLed, then started
 * again on its port): it ticks five times a second, and every tick failed with a warning of its
 * own, which buried the daemon's log during an outage. Now the streak is one line, then a recovery
 * line that counts the failed ticks (observability/retry-log.ts).
 */

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function startNode(port: number): Promise<RedisNodeProcess> {
  const node = spawnRedisNode(["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], `outage-${port}`);
  cleanups.push(() => node.signal("SIGKILL"));
  await waitFor(() => (node.exited() ? Promise.reject(new Error(node.log())) : redisAnswersPing(port, undefined)), {
    timeoutMs: 15_000,
    intervalMs: 50,
    what: `redis-server on ${port}`,
  });
  return node;
}

describe("bulk replay driver during a Redis outage", () => {
  it("logs the outage once and its end once, however many ticks failed", async () => {
    const port = await freePort();
    const node = await startNode(port);
    // No offline queue: while the node is down each tick fails at once instead of waiting for a reconnection.
    const conn = new Redis({ port, host: "127.0.0.1", maxRetriesPerRequest: 1, enableOfflineQueue: false, retryStrategy: () => 50 });
    conn.on("error", () => {});
    cleanups.push(() => conn.disconnect());
    const main = connectRedis();
    cleanups.push(() => main.disconnect());
    const keys = createKeys(testPrefix());
    const queue = new Queue(QUEUES.delivery, { connection: main.duplicate(), prefix: keys.queuePrefix("delivery") });
    cleanups.push(() => queue.close());
    const { logger, lines } = collectingLogger();
    const driver = new ReplayDriver({
      replays: new ReplayStore({ redis: conn, keys, now: Date.now, randomBytes }),
      log: new AttemptLog(conn, keys, 100_000, Date.now),
      jobs: new DeliveryJobQueue(queue, 4),
      queue,
      ratePerSecond: 100,
      owner: "outage-test",
      logger,
      tickMs: 50,
    });
    driver.start();
    cleanups.push(() => driver.close());
    await waitFor(() => conn.status === "ready", { timeoutMs: 10_000, what: "the driver's connection" });

    await node.signal("SIGKILL");
    const failed = () => lines.filter((l) => l.msg === "bulk replay driver tick failed");
    await waitFor(() => failed().length > 0, { timeoutMs: 10_000, what: "the outage's first line" });
    // A second of ticks (about twenty) while the node stays down.
    const downSince = Date.now();
    await waitFor(() => Date.now() - downSince >= 1000, { timeoutMs: 5_000, intervalMs: 100, what: "a second of failed ticks" });

    await startNode(port);
    const recovered = await waitFor(() => lines.find((l) => l.msg === "bulk replay driver tick failed: recovered"), {
      timeoutMs: 20_000,
      what: "the recovery line",
    });
    // The outage is one line and its end one line. What follows the recovery line is not this
    // outage's: on a loaded machine the reconnected client can drop once more right after the first
    // good tick, which is a streak (and a line) of its own.
    const upToRecovery = lines.slice(0, lines.indexOf(recovered) + 1);
    expect(upToRecovery.filter((l) => l.msg === "bulk replay driver tick failed")).toHaveLength(1);
    expect(upToRecovery.filter((l) => String(l.msg).startsWith("bulk replay driver tick failed"))).toHaveLength(2);
    // Many failed ticks behind those two lines.
    expect(recovered.failures).toBeGreaterThanOrEqual(5);
  }, 60_000);
});
