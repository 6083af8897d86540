import { Queue } from "bullmq";
import { Registry } from "prom-client";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FANOUT_GROUP } from "../../../src/events/fanout.js";
import { createMetrics } from "../../../src/observability/metrics.js";
import { QueueMonitor } from "../../../src/observability/queue-monitor.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import { OutboxStream } from "../../../src/store/outbox-stream.js";
import { keySpacePerTest } from "../../helpers/redis.js";

/**
 * Queue depth and oldest-waiting age (SPEC §7) sampled from real Redis: a BullMQ queue, and the
 * outbox, where direct first attempts wait for their settlement as read-but-unacknowledged entries.
 */

const space = keySpacePerTest();
let queue: Queue;

beforeEach(() => {
  queue = new Queue(QUEUES.delivery, { connection: space.redis.duplicate(), prefix: space.keys.queuePrefix("delivery") });
});

afterEach(async () => {
  await queue.close();
});

async function gauges(registry: Registry) {
  const depth = (await registry.getSingleMetric("tributary_queue_depth")?.get())?.values ?? [];
  const age = (await registry.getSingleMetric("tributary_queue_oldest_waiting_age_seconds")?.get())?.values ?? [];
  return {
    depth: (queue: string, state: string) => depth.find((v) => v.labels.queue === queue && v.labels.state === state)?.value,
    age: (queue: string) => age.find((v) => v.labels.queue === queue)?.value,
  };
}

describe("queue monitor", () => {
  it("reports each queue's waiting and delayed jobs, the outbox's unread and unacknowledged entries, and their oldest age", async () => {
    await queue.add("webhook", { n: 1 }, { timestamp: Date.now() - 30_000 });
    await queue.add("webhook", { n: 2 });
    await queue.add("webhook", { n: 3 }, { delay: 60_000 });
    // Five outbox entries over three shard outboxes, the oldest 20 s old (shard 5); a consumer read
    // two (shard 0) and acknowledged none. The series are sums over the shards.
    const shard = (i: number) => space.keys.shardOutbox(i);
    await new OutboxStream(space.redis, space.redis, space.keys).ensureGroup();
    await space.redis.xadd(shard(5), `${Date.now() - 20_000}-0`, "i", "a");
    for (let i = 0; i < 2; i++) await space.redis.xadd(shard(0), "*", "i", String(i));
    for (let i = 0; i < 2; i++) await space.redis.xadd(shard(15), "*", "i", String(i));
    await space.redis.xreadgroup("GROUP", FANOUT_GROUP, "c1", "COUNT", 2, "STREAMS", shard(0), ">");

    const registry = new Registry();
    const monitor = new QueueMonitor([queue], createMetrics(registry), 60_000, new OutboxStream(space.redis, space.redis, space.keys));
    await monitor.sample();
    const g = await gauges(registry);
    expect(g.depth(QUEUES.delivery, "waiting")).toBe(2);
    expect(g.depth(QUEUES.delivery, "delayed")).toBe(1);
    expect(g.age(QUEUES.delivery)).toBeGreaterThanOrEqual(29);
    expect(g.depth("outbox", "waiting")).toBe(3);
    expect(g.depth("outbox", "active")).toBe(2);
    expect(g.age("outbox")).toBeGreaterThanOrEqual(19);
    expect(g.age("outbox")).toBeLessThan(60);

    // Handed off (acknowledged and deleted): the outbox reads empty and its age drops to 0.
    for (const outbox of [0, 5, 15].map(shard)) {
      const ids = ((await space.redis.xrange(outbox, "-", "+")) as [string, string[]][]).map(([id]) => id);
      await space.redis.xack(outbox, FANOUT_GROUP, ...ids);
      await space.redis.xdel(outbox, ...ids);
    }
    await monitor.sample();
    const after = await gauges(registry);
    expect([after.depth("outbox", "waiting"), after.depth("outbox", "active"), after.age("outbox")]).toEqual([0, 0, 0]);
  });
});
