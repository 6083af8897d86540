import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { EventStore, type IngressCharge, type RecordInput } from "../../../src/store/events.js";
import { createKeys } from "../../../src/store/keys.js";
import { sharedKeySpace } from "../../helpers/redis.js";

/**
 * Group commit of the record step (store/record-groups.ts) against a real Redis: the records of one
 * event-loop turn to the same stream go in one script call, each keeping its own outcome, and
 * every stream keeps the order its records were made in.
 */
const space = sharedKeySpace();
const keys = createKeys(space.prefix);

const newUser = () => `u_${randomBytes(6).toString("hex")}`;

function input(userId: string, n: number, events = 1, emitterId = "p_grouped"): RecordInput {
  return {
    userId,
    emitterId,
    emitterKind: "workflow",
    channel: "",
    events: Array.from({ length: events }, (_, k) => ({ payload: { n, k }, meta: {}, emitId: `emit_${n}_${k}` })),
    acceptedAtMs: 1_000_000 + n,
  };
}

/** The payloads' `n` of a summary stream, oldest first. */
async function streamOrder(userId: string, emitterId = "p_grouped"): Promise<number[]> {
  const entries = (await space.redis().xrange(keys.events(userId, emitterId, ""), "-", "+")) as [string, string[]][];
  return entries.map(([, fields]) => (JSON.parse(fields[1] as string) as { p: { n: number } }).p.n);
}

function counted(store: EventStore) {
  const before = store.recordCounts();
  return () => {
    const now = store.recordCounts();
    return { requests: now.requests - before.requests, calls: now.calls - before.calls };
  };
}

/**
 * One turn of three charged records at the same instant (5 s), to a bucket of `burst` tokens
 * refilling at 1/s: records `first` (1 event, 1 token), `first + 1` (3 events, 3 tokens) and
 * `first + 2` (1 event, 1 token).
 */
function chargedTurn(store: EventStore, userId: string, burst: number, first: number) {
  const charge = (cost: number): IngressCharge => ({ key: keys.ingressRate(userId), cost, perSecond: 1, burst });
  return Promise.all(
    [1, 3, 1].map((events, k) =>
      store.recordGuarded({ ...input(userId, first + k, events), acceptedAtMs: 5_000 }, undefined, charge(events)),
    ),
  );
}

describe("record group commit", () => {
  it("sends the records of one turn to one stream as one call, each answered with its own ids, in order", async () => {
    const store = new EventStore(space.connect(), keys);
    const userId = newUser();
    const since = counted(store);
    const answers = await Promise.all([0, 1, 2, 3, 4].map((n) => store.record(input(userId, n, n === 2 ? 3 : 1))));
    expect(since()).toEqual({ requests: 5, calls: 1 });
    expect(answers.map((ids) => ids.length)).toEqual([1, 1, 3, 1, 1]);
    const flat = answers.flat();
    expect([...flat].sort()).toEqual(flat); // ids ascend in request order
    expect(await streamOrder(userId)).toEqual([0, 1, 2, 2, 2, 3, 4]);
    // Records of later turns are calls of their own.
    await store.record(input(userId, 5));
    await store.record(input(userId, 6));
    expect(since()).toEqual({ requests: 7, calls: 3 });
  });

  it("keeps each record's charge its own: a record the bucket cannot pay writes nothing, the others are written", async () => {
    const store = new EventStore(space.connect(), keys);
    const userId = newUser();
    const since = counted(store);
    // A burst of 3 tokens at the same instant: 1 + 3 cannot both be paid, the third (1) still can.
    const answers = await chargedTurn(store, userId, 3, 0);
    expect(since()).toEqual({ requests: 3, calls: 1 });
    expect(answers[0]).toHaveProperty("ids");
    expect(answers[1]).toEqual({ waitMs: 1_000 });
    expect(answers[2]).toHaveProperty("ids");
    expect(await streamOrder(userId)).toEqual([0, 2]);
    // The call read and wrote the bucket once, as three calls in a row would have left it: 3 - 1 - 1
    // tokens, refilled at 5 s, expiring once a full bucket would have refilled (3 s + 1 s).
    const bucket = keys.ingressRate(userId);
    expect(await space.redis().hmget(bucket, "t", "at")).toEqual(["1", "5000"]);
    expect(await space.redis().pttl(bucket)).toBeGreaterThan(3_000);
  });

  it("trims the stream to exactly its latest 100 once per call, on the last event recorded, also when the call's last record was refused", async () => {
    const store = new EventStore(space.connect(), keys);
    const userId = newUser();
    // 99 events in one record (one call), then a turn of three records: 1 + 3 events paid, the last refused.
    await store.record(input(userId, 0, 99));
    expect(await space.redis().xlen(keys.events(userId, "p_grouped", ""))).toBe(99);
    const since = counted(store);
    const answers = await chargedTurn(store, userId, 4, 1);
    expect(since()).toEqual({ requests: 3, calls: 1 });
    expect(answers[2]).toEqual({ waitMs: 1_000 });
    // 103 recorded in all: the oldest three are gone, the latest 100 kept.
    const order = await streamOrder(userId);
    expect(order).toHaveLength(100);
    expect(order.slice(0, 96)).toEqual(Array.from({ length: 96 }, () => 0));
    expect(order.slice(96)).toEqual([1, 2, 2, 2]);
    // A full record of 100 events on a full stream keeps exactly those 100.
    await store.record(input(userId, 4, 100));
    expect(await streamOrder(userId)).toEqual(Array.from({ length: 100 }, () => 4));
    // A record of no events last in its call: the trim rides on the call's last event all the same.
    await Promise.all([store.record(input(userId, 5)), store.record(input(userId, 6, 0))]);
    expect(since()).toEqual({ requests: 6, calls: 3 });
    const after = await streamOrder(userId);
    expect(after).toHaveLength(100);
    expect(after.at(-1)).toBe(5);
  });

  it("answers null to every record of a group whose guard key is missing, and writes nothing", async () => {
    const store = new EventStore(space.connect(), keys);
    const userId = newUser();
    const answers = await Promise.all([0, 1, 2].map((n) => store.recordGuarded(input(userId, n), keys.workflow)));
    expect(answers).toEqual([null, null, null]);
    expect(await streamOrder(userId)).toEqual([]);
  });

  it("gives records to other streams, or with another guard, calls of their own, and keeps every stream's order", async () => {
    const store = new EventStore(space.connect(), keys);
    const userId = newUser();
    const guard = keys.workflow(userId, "p_grouped");
    await space.redis().set(guard, "{}");
    const since = counted(store);
    await Promise.all([
      store.record(input(userId, 0)),
      store.record(input(userId, 10, 1, "p_other")),
      store.recordGuarded(input(userId, 1), keys.workflow),
      store.record(input(userId, 2)),
      store.record(input(userId, 11, 1, "p_other")),
    ]);
    // p_grouped: [0], then [1] (guarded), then [2] (unguarded again); p_other: [10, 11].
    expect(since()).toEqual({ requests: 5, calls: 4 });
    expect(await streamOrder(userId)).toEqual([0, 1, 2]);
    expect(await streamOrder(userId, "p_other")).toEqual([10, 11]);
  });

  it("starts another call once a group holds its limit of events, in order", async () => {
    const store = new EventStore(space.connect(), keys, { events: 4, chars: 1_000_000 });
    const userId = newUser();
    const since = counted(store);
    await Promise.all([0, 1, 2, 3, 4].map((n) => store.record(input(userId, n, 2))));
    expect(since()).toEqual({ requests: 5, calls: 3 });
    expect(await streamOrder(userId)).toEqual([0, 0, 1, 1, 2, 2, 3, 3, 4, 4]);
  });

  it("fails every record of a call Redis refuses, and no other", async () => {
    const store = new EventStore(space.connect(), keys);
    const userId = newUser();
    // The summary stream's key holds a string: XADD answers WRONGTYPE.
    await space.redis().set(keys.events(userId, "p_grouped", ""), "not a stream");
    const outcomes = await Promise.allSettled([
      store.record(input(userId, 0)),
      store.record(input(userId, 1)),
      store.record(input(userId, 2, 1, "p_other")),
    ]);
    expect(outcomes.map((o) => o.status)).toEqual(["rejected", "rejected", "fulfilled"]);
    expect(String((outcomes[0] as PromiseRejectedResult).reason)).toMatch(/WRONGTYPE/);
    expect(await streamOrder(userId, "p_other")).toEqual([2]);
  });
});
