import { randomBytes } from "node:crypto";
import { Cluster } from "ioredis";
import { Registry } from "prom-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deliveryIdFor } from "../../../src/domain/ids.js";
import { FanoutWorker } from "../../../src/events/fanout.js";
import { createLogger } from "../../../src/observability/logger.js";
import { createMetrics } from "../../../src/observability/metrics.js";
import type { DeliveryJob } from "../../../src/queue/catalog.js";
import type { StoreContext } from "../../../src/store/context.js";
import { EventStore } from "../../../src/store/events.js";
import { createKeys } from "../../../src/store/keys.js";
import { OutboxStream } from "../../../src/store/outbox-stream.js";
import { SubscriptionStore } from "../../../src/store/subscriptions.js";
import { keySlot, type LocalCluster, startCluster } from "../../helpers/cluster.js";
import { testPrefix } from "../../helpers/redis.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * The sharded outbox on a real 3-master Redis Cluster (docs/decisions.md "Sharded outbox"): the
 * record step appends to the user's shard outbox in the user's slot (one script, no CROSSSLOT),
 * and fan-out, refused a multi-key XREADGROUP across slots, reads each shard on its own blocking
 * Cluster connection, acknowledging on each entry's own stream. The full daemon on a cluster is
 * tested elsewhere; this drives EventStore, OutboxStream and FanoutWorker directly.
 */

let cluster: LocalCluster;
const clients: Cluster[] = [];

function connect(): Cluster {
  const c = new Cluster(
    cluster.seeds.map((s) => ({ ...s })),
    { redisOptions: { maxRetriesPerRequest: null } },
  );
  c.on("error", () => {});
  clients.push(c);
  return c;
}

beforeAll(async () => {
  cluster = await startCluster({ masters: 3 });
}, 60_000);

afterAll(async () => {
  for (const c of clients) c.disconnect();
  await cluster?.stop();
});

describe("sharded outbox on a Redis Cluster", () => {
  it("records events of users on every shard through EventStore, and fan-out reads, fans out and acknowledges them all", async () => {
    const keys = createKeys(testPrefix());
    const redis = connect();
    const ctx: StoreContext = { redis, keys, now: Date.now, randomBytes: (n) => randomBytes(n) };
    const subscriptions = new SubscriptionStore(ctx);
    const events = new EventStore(redis, keys);
    // The shard outboxes are spread over the three masters.
    const owners = new Set(keys.shardTags.map((_, i) => cluster.nodeForSlot(keySlot(keys.shardOutbox(i))).port));
    expect(owners.size).toBe(3);

    // One user per shard, each subscribed to its emitter.
    const byShard = new Map<number, string>();
    while (byShard.size < keys.shards) {
      const id = `u_${randomBytes(8).toString("hex")}`;
      if (!byShard.has(keys.shardOf(id))) byShard.set(keys.shardOf(id), id);
    }
    const users = [...byShard.values()];
    for (const userId of users) await subscriptions.create(userId, "p_cluster", "wh_listener0001", "");
    const record = (userId: string, n: number) =>
      events.record({
        userId,
        emitterId: "p_cluster",
        emitterKind: "workflow",
        channel: "",
        events: Array.from({ length: n }, (_, i) => ({ payload: { i }, meta: {}, emitId: `emit_${i}` })),
        acceptedAtMs: Date.now(),
      });
    const recorded = new Map<string, string[]>();
    // Half the events before fan-out starts (read from the groups' start), half while it blocks.
    for (const userId of users) recorded.set(userId, await record(userId, 2));
    for (const userId of users) expect(await redis.xlen(keys.outboxOf(userId))).toBe(2);

    const jobs: DeliveryJob[] = [];
    const opened: string[] = [];
    const fanout = new FanoutWorker({
      blocking: connect(),
      openBlocking: (name) => {
        opened.push(name);
        return connect();
      },
      redis,
      keys,
      subscriptions,
      deliveryJobs: {
        addAll: async (added) => {
          jobs.push(...added);
        },
      },
      sourceRuns: { addAll: async () => {} },
      logger: createLogger("silent"),
      metrics: createMetrics(new Registry()),
      consumer: "cluster-consumer",
      claimIdleMs: 15_000,
    });
    try {
      await fanout.start();
      // One reader per shard: the first on `blocking`, the others on connections of their own.
      expect(opened).toHaveLength(keys.shards - 1);
      for (const userId of users) recorded.get(userId)?.push(...(await record(userId, 2)));

      const expected = users.flatMap((userId) =>
        (recorded.get(userId) ?? []).map((eventId) =>
          deliveryIdFor({ userId, emitterId: "p_cluster", channel: "", eventId }, "wh_listener0001"),
        ),
      );
      await waitFor(() => jobs.length >= expected.length, { what: `${expected.length} delivery jobs`, timeoutMs: 20_000 });
      expect(jobs.map((j) => j.deliveryId).sort()).toEqual([...expected].sort());
      // Each user's events were fanned out in the order they were recorded.
      for (const userId of users) expect(jobs.filter((j) => j.userId === userId).map((j) => j.eventId)).toEqual(recorded.get(userId));

      // Acknowledged and deleted on every shard (the stats read each shard on its own node).
      const outbox = new OutboxStream(redis, redis, keys);
      await waitFor(
        async () => {
          const s = await outbox.stats();
          return s.length === 0 && s.pending === 0;
        },
        { what: "every shard outbox acknowledged and emptied" },
      );
    } finally {
      await fanout.close();
    }
  }, 60_000);
});
