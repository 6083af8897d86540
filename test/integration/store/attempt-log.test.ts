import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AttemptChange, AttemptLog, type DeliveryBase, type DeliveryStatus } from "../../../src/store/attempt-log.js";
import { createKeys } from "../../../src/store/keys.js";
import { connectRedis, dropPrefix, testPrefix } from "../../helpers/redis.js";

/** The attempt log's own writes against a real Redis: creation on the first attempt, trim, payload. */
const prefix = testPrefix();
const keys = createKeys(prefix);
let redis: Redis;

beforeAll(() => {
  redis = connectRedis();
});
afterAll(async () => {
  await dropPrefix(redis, prefix);
  redis.disconnect();
});

let seq = 0;
/** A delivery to `listenerId`, a webhook that exists (the log is only written for live listeners). */
async function base(listenerId: string): Promise<DeliveryBase> {
  seq++;
  await redis.set(keys.webhook("u_log", listenerId), "{}");
  return {
    id: `d_test${seq}`,
    user_id: "u_log",
    listener_id: listenerId,
    listener_kind: "webhook",
    event_id: `${1_700_000_000_000 + seq}-0`,
    emitter_id: "p_log",
    event_name: "",
    payload: JSON.stringify({ n: seq }),
    accepted_at_ms: 1_700_000_000_000,
  };
}

const attempt = (status: DeliveryStatus): AttemptChange => ({
  status,
  attempt: { at: "2026-01-01T00:00:00.000Z", status_code: status === "delivered" ? 200 : 500, duration_ms: 1, error: null },
});

describe("AttemptLog", () => {
  it("creates the record on the first write, appends on later ones, and never overwrites a record it did not read", async () => {
    const log = new AttemptLog(redis, keys, 100, Date.now);
    const b = await base("wh_one");
    const first = await log.upsert(b, attempt("pending"));
    expect(first).toMatchObject({ id: b.id, status: "pending", attempts: [{ attempt: 1 }], payload: b.payload });
    // A second runner that did not read the record (a stalled job taken over) appends to it.
    const second = await log.upsert(b, attempt("delivered"));
    expect(second?.attempts.map((a) => a.attempt)).toEqual([1, 2]);
    const stored = await log.get("u_log", b.id);
    expect(stored).toMatchObject({ status: "delivered", attempts: [{ attempt: 1 }, { attempt: 2 }] });
    expect(stored?.payload).toBe(""); // delivered: nothing left to replay
    expect(await redis.zcard(keys.deliveries("u_log", "wh_one"))).toBe(1);
  });

  it("marks a given-up delivery failed, unless a late run delivered it", async () => {
    const log = new AttemptLog(redis, keys, 100, Date.now);
    const given = await base("wh_given");
    await log.upsert(given, attempt("pending"));
    expect(await log.upsert(given, { status: "failed", keepDelivered: true })).toMatchObject({
      status: "failed",
      attempts: [{ attempt: 1 }],
    });
    const done = await base("wh_given");
    await log.upsert(done, attempt("delivered"));
    expect(await log.upsert(done, { status: "failed", keepDelivered: true })).toMatchObject({ status: "delivered" });
    // Never attempted (BullMQ gave up before the first attempt ended): created failed, no attempts.
    const never = await base("wh_given");
    expect(await log.upsert(never, { status: "failed", keepDelivered: true })).toMatchObject({
      status: "failed",
      attempts: [],
      payload: never.payload,
    });
  });

  it("writes nothing once the listener is gone (a webhook deleted while its attempt was in flight)", async () => {
    const log = new AttemptLog(redis, keys, 100, Date.now);
    const b = await base("wh_gone");
    await redis.del(keys.webhook("u_log", "wh_gone"));
    expect(await log.upsert(b, attempt("delivered"))).toBeUndefined();
    expect(await redis.exists(keys.delivery("u_log", b.id), keys.deliveries("u_log", "wh_gone"))).toBe(0);
  });

  it("keeps a failed delivery's payload for replay", async () => {
    const log = new AttemptLog(redis, keys, 100, Date.now);
    const b = await base("wh_failed");
    await log.upsert(b, attempt("failed"));
    expect((await log.get("u_log", b.id))?.payload).toBe(b.payload);
  });

  it("keeps the newest `limit` finished deliveries per listener, but never a pending one", async () => {
    const log = new AttemptLog(redis, keys, 3, Date.now);
    const pending = await base("wh_trim");
    await log.upsert(pending, attempt("pending")); // the oldest, still waiting for a retry
    const finished: string[] = [];
    for (let i = 0; i < 6; i++) {
      const b = await base("wh_trim");
      finished.push(b.id);
      await log.upsert(b, attempt("delivered"));
    }
    const ids = await redis.zrange(keys.deliveries("u_log", "wh_trim"), 0, -1);
    expect(ids).toContain(pending.id);
    // Over the limit only by the pending one; the oldest finished ones are gone with their records.
    expect(ids.filter((id) => id !== pending.id)).toEqual(finished.slice(-3));
    expect(await log.get("u_log", finished[0] as string)).toBeUndefined();
    const page = await log.list("u_log", "wh_trim", { limit: 10 });
    expect(page.data.map((d) => d.id)).toEqual([...finished.slice(-3)].reverse().concat(pending.id));
  });

  it("trims in batches: it lets the log run limit/20 over, then cuts it back to the limit", async () => {
    const log = new AttemptLog(redis, keys, 40, Date.now); // slack 2
    const count = () => redis.zcard(keys.deliveries("u_log", "wh_batch"));
    for (let i = 0; i < 41; i++) await log.upsert(await base("wh_batch"), attempt("delivered"));
    expect(await count()).toBe(41);
    await log.upsert(await base("wh_batch"), attempt("delivered"));
    expect(await count()).toBe(40);
  });

  it("does not read the pending records that hold the log over its limit again for every new delivery", async () => {
    const log = new AttemptLog(redis, keys, 200, Date.now); // slack 10
    // A backlog after an outage: 300 deliveries still retrying hold the oldest places of the log.
    for (let i = 0; i < 300; i++) await log.upsert(await base("wh_backlog"), attempt("pending"));
    // The trim's MGETs inside the creation script, as MONITOR sees them (this log's keys only).
    const monitor = await connectRedis().monitor();
    let trimReads = 0;
    monitor.on("monitor", (_time: string, args: string[]) => {
      if (String(args[0]).toLowerCase() === "mget" && String(args[1]).startsWith(keys.delivery("u_log", ""))) trimReads++;
    });
    try {
      for (let i = 0; i < 100; i++) await log.upsert(await base("wh_backlog"), attempt("delivered"));
      await redis.ping();
      await new Promise((r) => setTimeout(r, 200));
    } finally {
      monitor.disconnect();
    }
    // Once per `slack` creations, not at each of the 100.
    expect(trimReads).toBeGreaterThan(0);
    expect(trimReads).toBeLessThanOrEqual(100 / 10 + 1);
    // The pending ones stay; the log trims what it may (the delivered beyond the limit).
    expect(await redis.zcard(keys.deliveries("u_log", "wh_backlog"))).toBeLessThanOrEqual(400);
  });

  it("claims a record only while it is what was read, so two replays racing for it claim it once", async () => {
    const log = new AttemptLog(redis, keys, 100, Date.now);
    const b = await base("wh_claim");
    await log.upsert(b, attempt("failed"));
    const [first] = await log.readForClaim("u_log", [b.id]);
    const [second] = await log.readForClaim("u_log", [b.id]);
    const pendingAgain = (r: NonNullable<typeof first>, replayId: string) => ({
      ...r.record,
      status: "pending" as const,
      replays: r.record.replays + 1,
      replay_id: replayId,
    });
    expect(await log.claim(first!, pendingAgain(first!, "rpl_one"))).toBe(true);
    expect(await log.claim(second!, pendingAgain(second!, "rpl_two"))).toBe(false);
    expect(await log.get("u_log", b.id)).toMatchObject({ status: "pending", replays: 1, replay_id: "rpl_one" });
    expect(await log.readForClaim("u_log", ["d_missing"])).toEqual([]);
  });

  it("counts a replayed delivery's outcome in its replay once it settles, and drops the replay id", async () => {
    const log = new AttemptLog(redis, keys, 100, Date.now);
    const b = await base("wh_settle");
    await log.upsert(b, attempt("failed"));
    const [read] = await log.readForClaim("u_log", [b.id]);
    await redis.hset(keys.replay("u_log", "rpl_settle"), "webhook_id", "wh_settle");
    await redis.pexpire(keys.replay("u_log", "rpl_settle"), 60_000);
    await log.claim(read!, { ...read!.record, status: "pending", replays: 1, replay_id: "rpl_settle" });
    // A retry keeps it under the replay; the final outcome counts.
    const retried = await log.upsert(b, attempt("pending"), await log.get("u_log", b.id));
    expect(retried?.replay_id).toBe("rpl_settle");
    expect(await redis.exists(keys.replayOutcome("u_log", "rpl_settle", "delivered"))).toBe(0);
    const settled = await log.upsert(b, attempt("delivered"), retried);
    expect(settled?.replay_id).toBeUndefined();
    expect(await redis.smembers(keys.replayOutcome("u_log", "rpl_settle", "delivered"))).toEqual([b.id]);
    expect(await redis.pttl(keys.replayOutcome("u_log", "rpl_settle", "delivered"))).toBeGreaterThan(0);
    expect((await log.get("u_log", b.id))?.replay_id).toBeUndefined();

    // A replay that expired counts nothing (and leaves no set without an expiry behind).
    const late = await base("wh_settle");
    await log.upsert(late, attempt("failed"));
    const [lateRead] = await log.readForClaim("u_log", [late.id]);
    await log.claim(lateRead!, { ...lateRead!.record, status: "pending", replays: 1, replay_id: "rpl_gone" });
    expect(await log.upsert(late, attempt("failed"), await log.get("u_log", late.id))).toMatchObject({ status: "failed" });
    expect(await redis.exists(keys.replayOutcome("u_log", "rpl_gone", "failed"))).toBe(0);
  });
});
