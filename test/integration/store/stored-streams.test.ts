import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { EventStore, type NewEvent, type RecordInput } from "../../../src/store/events.js";
import { createKeys } from "../../../src/store/keys.js";
import type { StorageLimits } from "../../../src/store/record-targets.js";
import { sharedKeySpace } from "../../helpers/redis.js";

/**
 * A user's storage accounting in the record step (store/scripts/record-events.ts) and in deletions
 * (store/scripts/delete-stream-events.ts), against a real Redis: the stored-streams hash holds,
 * per stream, exactly the bytes of the summary records the stream keeps (through trims, range
 * deletions and group commits), and the limits refuse a new stream or growth past them.
 */
const space = sharedKeySpace();
const keys = createKeys(space.prefix);
const newUser = () => `u_${randomBytes(6).toString("hex")}`;

function events(n: number, size: number, tag = "e"): NewEvent[] {
  return Array.from({ length: n }, (_, i) => ({ payload: { s: "x".repeat(size), i }, meta: {}, emitId: `emit_${tag}${i}` }));
}

function input(userId: string, channel: string, evs: NewEvent[], emitterId = "p_store"): RecordInput {
  return { userId, emitterId, emitterKind: "workflow", channel, events: evs, acceptedAtMs: Date.now() };
}

function store(limits?: StorageLimits): { redis: ReturnType<typeof space.connect>; events: EventStore } {
  const redis = space.connect();
  return { redis, events: new EventStore(redis, keys, undefined, limits) };
}

/** The bytes a stream really keeps: its summary records' lengths. */
async function kept(redis: ReturnType<typeof space.connect>, userId: string, emitterId: string, channel: string): Promise<number> {
  const entries = (await redis.xrange(keys.events(userId, emitterId, channel), "-", "+")) as [string, string[]][];
  return entries.reduce((sum, [, fields]) => sum + Buffer.byteLength(fields[1] ?? ""), 0);
}

async function accounted(redis: ReturnType<typeof space.connect>, userId: string): Promise<Record<string, string>> {
  return redis.hgetall(keys.storedStreams(userId));
}

describe("stored-streams accounting", () => {
  it("holds exactly what each stream keeps, through trims past 100, batches, range deletions and whole-stream deletion", async () => {
    const { redis, events: es } = store();
    const userId = newUser();
    // Sizes vary so that a wrong entry taken back would show.
    for (let round = 0; round < 6; round++) await es.record(input(userId, "a", events(7 + round * 5, 10 + round * 40, `r${round}`)));
    await es.record(input(userId, "a", events(130, 25, "big")));
    await es.record(input(userId, "b", events(3, 100)));
    for (let i = 0; i < 20; i++) await es.record(input(userId, "a", events(1, (i * 37) % 300, `s${i}`)));
    const a = await kept(redis, userId, "p_store", "a");
    const b = await kept(redis, userId, "p_store", "b");
    expect(await redis.xlen(keys.events(userId, "p_store", "a"))).toBe(100);
    expect(await accounted(redis, userId)).toEqual({ "p_store:a": String(a), "p_store:b": String(b), bytes: String(a + b) });

    const ids = ((await redis.xrange(keys.events(userId, "p_store", "a"), "-", "+")) as [string, string[]][]).map(([id]) => id);
    expect(await es.deleteRange(userId, "p_store", "a", ids[10] as string, ids[29] as string)).toBe(20);
    expect(await es.deleteRange(userId, "p_store", "a", null, ids[4] as string)).toBe(5);
    const left = await kept(redis, userId, "p_store", "a");
    expect(left).toBeLessThan(a);
    expect(await accounted(redis, userId)).toEqual({ "p_store:a": String(left), "p_store:b": String(b), bytes: String(left + b) });

    expect(await es.deleteRange(userId, "p_store", "b", null, null)).toBe(1);
    expect(await accounted(redis, userId)).toEqual({ "p_store:a": String(left), bytes: String(left) });
    expect(await es.channels(userId, "p_store")).toEqual(["a"]);
    await es.dropEmitter(userId, "p_store");
    expect(await redis.exists(keys.storedStreams(userId), keys.events(userId, "p_store", "a"))).toBe(0);
  });

  it("keeps the accounting of requests grouped in one call, each judged in order", async () => {
    const { redis, events: es } = store();
    const userId = newUser();
    await es.record(input(userId, "", events(95, 50, "fill")));
    // One turn: the group commit sends these as one call of the script.
    await Promise.all([1, 2, 3, 4].map((k) => es.record(input(userId, "", events(3, 20 * k, `g${k}`)))));
    const bytes = await kept(redis, userId, "p_store", "");
    expect(await accounted(redis, userId)).toEqual({ "p_store:": String(bytes), bytes: String(bytes) });
    expect(es.recordCounts().calls).toBeLessThan(es.recordCounts().requests);
  });

  it("refuses a new stream at the streams limit, keeps the existing ones taking events, and frees it on deletion", async () => {
    const { redis, events: es } = store({ streams: 2, storedBytes: 0 });
    const userId = newUser();
    expect(await es.recordGuarded(input(userId, "a", events(1, 10)), undefined)).toHaveProperty("ids");
    expect(await es.recordGuarded(input(userId, "b", events(1, 10), "p_other"), undefined)).toHaveProperty("ids");
    const refused = await es.recordGuarded(input(userId, "c", events(1, 10)), undefined);
    expect(refused).toEqual({ refused: { limit: "streams", streams: 2, max: 2 } });
    expect(await redis.exists(keys.events(userId, "p_store", "c"))).toBe(0);
    expect(await es.channels(userId, "p_store")).toEqual(["a"]);
    expect(await es.recordGuarded(input(userId, "a", events(2, 10, "more")), undefined)).toHaveProperty("ids");

    await es.dropEmitter(userId, "p_other");
    expect(await es.recordGuarded(input(userId, "c", events(1, 10)), undefined)).toHaveProperty("ids");
    // Deleting a stream's events by range keeps the stream (it still counts); deleting it whole frees it.
    await es.deleteRange(userId, "p_store", "c", null, "+");
    expect(await es.recordGuarded(input(userId, "d", events(1, 10)), undefined)).toHaveProperty("refused");
    await es.deleteRange(userId, "p_store", "c", null, null);
    expect(await es.recordGuarded(input(userId, "d", events(1, 10)), undefined)).toHaveProperty("ids");
  });

  it("refuses growth past the stored bytes limit without taking the charge, accepts what replaces as much as it adds, and frees on deletion", async () => {
    const userId = newUser();
    const filler = store();
    for (let i = 0; i < 10; i++) await filler.events.record(input(userId, "full", events(10, 100, `f${i}`)));
    const held = Number((await accounted(filler.redis, userId)).bytes);
    expect(held).toBe(await kept(filler.redis, userId, "p_store", "full"));
    const limit = held + 10;
    const { redis, events: es } = store({ streams: 0, storedBytes: limit });
    // A full stream: a smaller event replaces the oldest, so it is recorded at the limit.
    for (let i = 0; i < 3; i++)
      expect(await es.recordGuarded(input(userId, "full", events(1, 50, `same${i}`)), undefined)).toHaveProperty("ids");
    const now = Number((await accounted(redis, userId)).bytes);
    expect(now).toBeLessThan(held);
    // Another stream would grow what is held past the limit: refused, and the bucket keeps its token.
    const charge = { key: keys.ingressRate(userId), cost: 1, perSecond: 1, burst: 1 };
    const refused = await es.recordGuarded(input(userId, "other", events(1, 400)), undefined, charge);
    expect(refused).toEqual({ refused: { limit: "stored_bytes", bytes: now, adding: expect.any(Number), max: limit } });
    expect(now + (refused as { refused: { adding: number } }).refused.adding).toBeGreaterThan(limit);
    expect(await redis.exists(keys.events(userId, "p_store", "other"), keys.ingressRate(userId))).toBe(0);
    expect(await es.recordGuarded(input(userId, "full", events(1, 50, "paid")), undefined, charge)).toHaveProperty("ids");
    expect(await redis.exists(keys.ingressRate(userId))).toBe(1);

    await es.deleteRange(userId, "p_store", "full", null, null);
    expect(await redis.exists(keys.storedStreams(userId))).toBe(0);
    expect(await es.recordGuarded(input(userId, "other", events(1, 100)), undefined)).toHaveProperty("ids");
  });
});
