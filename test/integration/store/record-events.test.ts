import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { EventStore, type RecordInput } from "../../../src/store/events.js";
import { createKeys } from "../../../src/store/keys.js";
import { sharedKeySpace } from "../../helpers/redis.js";

/**
 * The record script's guard and ingress charge (store/scripts/record-events.ts) against a real
 * Redis: a guard key is checked only when one is given, and the bucket is charged at the record's
 * accepted-at time.
 */
const space = sharedKeySpace();
const keys = createKeys(space.prefix);

function input(userId: string, acceptedAtMs: number): RecordInput {
  return {
    userId,
    emitterId: "p_guarded",
    emitterKind: "workflow",
    channel: "",
    events: [{ payload: { n: acceptedAtMs }, meta: {}, emitId: `emit_${acceptedAtMs}` }],
    acceptedAtMs,
  };
}

describe("recordGuarded", () => {
  it("writes nothing while the guard key is missing, and records once it exists", async () => {
    const redis = space.connect();
    const store = new EventStore(redis, keys);
    const userId = `u_${randomBytes(6).toString("hex")}`;
    const guard = keys.workflow(userId, "p_guarded");
    const summary = keys.events(userId, "p_guarded", "");
    expect(await store.recordGuarded(input(userId, 1_000), keys.workflow)).toBeNull();
    expect(await redis.xlen(summary)).toBe(0);
    await redis.set(guard, "{}");
    const r = await store.recordGuarded(input(userId, 2_000), keys.workflow);
    expect(r !== null && "ids" in r ? r.ids : r).toHaveLength(1);
    expect(await redis.xlen(summary)).toBe(1);
    // Without a guard nothing is checked.
    expect(await store.record({ ...input(userId, 3_000), emitterId: "p_unguarded" })).toHaveLength(1);
  });

  it("charges the bucket at the accepted-at time: a refill follows that clock, not Redis's", async () => {
    const redis = space.connect();
    const store = new EventStore(redis, keys);
    const userId = `u_${randomBytes(6).toString("hex")}`;
    const charge = { key: keys.ingressRate(userId), cost: 1, perSecond: 1, burst: 1 };
    const summary = keys.events(userId, "p_guarded", "");
    const t0 = 5_000_000;
    expect(await store.recordGuarded(input(userId, t0), undefined, charge)).toHaveProperty("ids");
    // 100 ms later at one token a second, the bucket is 900 ms short of a token; nothing is written.
    const refused = await store.recordGuarded(input(userId, t0 + 100), undefined, charge);
    expect(refused).toEqual({ waitMs: 900 });
    expect(await redis.xlen(summary)).toBe(1);
    // A second after the first, by the records' own clock, it can pay again.
    expect(await store.recordGuarded(input(userId, t0 + 1_000), undefined, charge)).toHaveProperty("ids");
    expect(await redis.xlen(summary)).toBe(2);
  });
});
