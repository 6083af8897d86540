import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { deliveryIdFor } from "../../../src/domain/ids.js";
import { FANOUT_GROUP } from "../../../src/events/fanout.js";
import { waitFor } from "../../helpers/receiver.js";
import {
  attempter,
  createGroup,
  deliveryWorker,
  direct,
  fanout,
  hookedUser,
  installPipeline,
  jobIds,
  newUserId,
  outboxLength,
  outboxPending,
  recordEvents,
  rx,
  w,
} from "../../helpers/pipeline.js";

/**
 * The sharded outbox (SPEC §8, docs/decisions.md "Sharded outbox") on one Redis node: each user's
 * events go to the outbox of the user's shard, and fan-out reads every shard (one XREADGROUP over
 * all of them), acknowledges on each entry's own stream, and takes over a dead consumer's entries
 * shard by shard.
 */

installPipeline();

/** `n` new user ids, one in each of `n` different shards. */
function usersOnShards(n: number): string[] {
  const byShard = new Map<number, string>();
  while (byShard.size < n) {
    const id = newUserId();
    const shard = w.keys.shardOf(id);
    if (!byShard.has(shard)) byShard.set(shard, id);
  }
  return [...byShard.values()];
}

describe("sharded outbox", () => {
  it("records each user's events in the user's shard outbox, in order", async () => {
    const [a, b] = usersOnShards(2) as [string, string];
    for (const u of [a, b]) await w.subscriptions.create(u, "p_order", "wh_listener0001", "");
    const ids = await recordEvents(a, "p_order", 5);
    await recordEvents(b, "p_order", 2);
    const entries = (await w.redis.xrange(w.keys.outboxOf(a), "-", "+")) as [string, string[]][];
    expect(entries.map(([, f]) => f[f.indexOf("i") + 1])).toEqual(ids);
    expect(await w.redis.xlen(w.keys.outboxOf(b))).toBe(2);
    expect(w.keys.outboxOf(a)).not.toBe(w.keys.outboxOf(b));
    expect(await outboxLength()).toBe(7);
  });

  it("fans out and delivers the events of users on every shard, direct and queued, and empties every shard outbox", async () => {
    const users = usersOnShards(w.keys.shards);
    const base = `/shard-${randomBytes(4).toString("hex")}`;
    const perUser = 3;
    const expected: string[] = [];
    for (const [i, userId] of users.entries()) {
      const { hook } = await hookedUser(`${base}-${i}`, "p_sharded", userId);
      expect(hook.id).toBeTruthy();
    }
    for (const [i, userId] of users.entries())
      expected.push(...(await recordEvents(userId, "p_sharded", perUser)).map((id) => `${i} ${id}`));
    expect(await outboxLength()).toBe(users.length * perUser);

    // A few direct slots: some first attempts are made directly (held, then acknowledged per
    // shard), the rest are queued for the worker.
    const through = attempter();
    deliveryWorker(through).start();
    await fanout("sharded", 15_000, direct(through, { concurrency: 4 })).start();
    // Event ids are unique per emitter stream only: count (user, event) pairs.
    const delivered = () => new Set(users.flatMap((_, i) => rx.to(`${base}-${i}`).map((r) => `${i} ${r.headers["x-tributary-event-id"]}`)));
    await waitFor(() => delivered().size >= expected.length, { what: `${expected.length} deliveries`, timeoutMs: 20_000 });
    expect([...delivered()].sort()).toEqual([...expected].sort());
    await waitFor(async () => (await outboxLength()) === 0 && (await outboxPending()) === 0, {
      what: "every shard outbox acknowledged and emptied",
    });
  });

  it("takes over a dead consumer's pending entries on several shards", async () => {
    const users = usersOnShards(4);
    for (const u of users) await w.subscriptions.create(u, "p_dead", "wh_listener0001", "");
    await createGroup();
    const expected: string[] = [];
    for (const userId of users)
      for (const eventId of await recordEvents(userId, "p_dead", 2))
        expected.push(deliveryIdFor({ userId, emitterId: "p_dead", channel: "", eventId }, "wh_listener0001"));
    // A consumer reads every shard in one XREADGROUP and dies before fanning anything out.
    const streams = Array.from({ length: w.keys.shards }, (_, i) => w.keys.shardOutbox(i));
    await w.redis.xreadgroup("GROUP", FANOUT_GROUP, "dead-consumer", "COUNT", 100, "STREAMS", ...streams, ...streams.map(() => ">"));
    for (const u of users) expect(Number(((await w.redis.xpending(w.keys.outboxOf(u), FANOUT_GROUP)) as [number])[0])).toBe(2);
    expect(await outboxPending()).toBe(8);

    await fanout("live-consumer", 300).start();
    await waitFor(async () => (await jobIds(w.deliveryQueue)).length === expected.length, { what: "8 delivery jobs", timeoutMs: 10_000 });
    expect(await jobIds(w.deliveryQueue)).toEqual(expected.sort());
    // Redone through the queue (the entries' first attempts may have been made).
    for (const job of await w.deliveryQueue.getJobs(["wait"])) expect(job.data.origin).toBe("redo");
    await waitFor(async () => (await outboxPending()) === 0 && (await outboxLength()) === 0, {
      what: "every shard's pending list emptied",
    });
  });
});
