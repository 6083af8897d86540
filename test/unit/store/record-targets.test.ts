import { describe, expect, it } from "vitest";
import { createKeys } from "../../../src/store/keys.js";
import { type GuardKeyOf, RecordTargets } from "../../../src/store/record-targets.js";

/**
 * The record script's targets (store/record-targets.ts): one object per user, emitter, channel
 * and terms, whose keys and shared arguments are those the record script documents
 * (store/scripts/record-events.ts).
 */
const keys = createKeys("t");
const bucket = { key: keys.ingressRate("u_1"), perSecond: 50, burst: 200 };
const workflowGuard: GuardKeyOf = (userId, id) => keys.workflow(userId, id);

describe("RecordTargets", () => {
  it("builds the record script's eight keys and eight shared arguments", () => {
    const targets = new RecordTargets(keys, { streams: 10, storedBytes: 1000 });
    const t = targets.get("u_1", "p_abc", "orders", "workflow", workflowGuard, bucket);
    const summary = keys.events("u_1", "p_abc", "orders");
    expect(t.keys).toEqual([
      summary,
      keys.outboxOf("u_1"),
      keys.eventChannels("u_1", "p_abc"),
      keys.subscriptionIndex("u_1", "p_abc", "orders"),
      keys.subscriptionIndex("u_1", "p_*", "orders"),
      keys.workflow("u_1", "p_abc"),
      bucket.key,
      keys.storedStreams("u_1"),
    ]);
    expect(t.shared).toEqual(["u_1", "p_abc", "orders", "workflow", "50", "200", "10", "1000"]);
  });

  it("repeats the summary stream for no guard and no bucket, the exact index for an emitter without a glob, and charges 0", () => {
    const t = new RecordTargets(keys).get("u_1", "other", "", "source", undefined, undefined);
    const summary = keys.events("u_1", "other", "");
    const exact = keys.subscriptionIndex("u_1", "other", "");
    expect(t.keys).toEqual([
      summary,
      keys.outboxOf("u_1"),
      keys.eventChannels("u_1", "other"),
      exact,
      exact,
      summary,
      summary,
      keys.storedStreams("u_1"),
    ]);
    expect(t.shared).toEqual(["u_1", "other", "", "source", "0", "0", "0", "0"]);
  });

  it("hands out the same object for the same user, emitter, channel and terms, even from strings built anew", () => {
    const targets = new RecordTargets(keys);
    const first = targets.get("u_1", "p_abc", "", "workflow", workflowGuard, bucket);
    const again = targets.get(["u", "1"].join("_"), ["p", "abc"].join("_"), "", "workflow", workflowGuard, {
      key: ["t:{", keys.ingressRate("u_1").slice(3)].join(""),
      perSecond: 50,
      burst: 200,
    });
    expect(again).toBe(first);
    expect(targets.count).toBe(1);
  });

  it("names the guard key once, when it builds the target", () => {
    const named: string[] = [];
    const counting: GuardKeyOf = (userId, id) => {
      named.push(id);
      return keys.workflow(userId, id);
    };
    const targets = new RecordTargets(keys);
    for (let i = 0; i < 3; i++) targets.get("u_1", "p_abc", "", "workflow", counting, bucket);
    expect(named).toEqual(["p_abc"]);
  });

  it("keeps emitters, channels and users apart", () => {
    const targets = new RecordTargets(keys);
    const a = targets.get("u_1", "p_abc", "", "workflow", undefined, undefined);
    const b = targets.get("u_1", "p_abc", "other", "workflow", undefined, undefined);
    const c = targets.get("u_1", "p_def", "", "workflow", undefined, undefined);
    const d = targets.get("u_2", "p_abc", "", "workflow", undefined, undefined);
    expect(new Set([a, b, c, d]).size).toBe(4);
    expect([a, b, c, d].map((t) => t.keys[0])).toEqual([
      keys.events("u_1", "p_abc", ""),
      keys.events("u_1", "p_abc", "other"),
      keys.events("u_1", "p_def", ""),
      keys.events("u_2", "p_abc", ""),
    ]);
    expect(targets.count).toBe(4);
  });

  it("rebuilds a target whose guard, bucket, rate, burst or kind changed", () => {
    const targets = new RecordTargets(keys);
    const guarded = targets.get("u_1", "p_abc", "", "workflow", workflowGuard, bucket);
    const unguarded = targets.get("u_1", "p_abc", "", "workflow", undefined, bucket);
    expect(unguarded.keys[5]).toBe(unguarded.keys[0]);
    const back = targets.get("u_1", "p_abc", "", "workflow", workflowGuard, bucket);
    expect(back.keys[5]).toBe(keys.workflow("u_1", "p_abc"));
    expect(back).not.toBe(unguarded);
    expect(guarded.keys).toEqual(back.keys);
    const otherGuard = targets.get("u_1", "p_abc", "", "workflow", (u, id) => `${keys.workflow(u, id)}:other`, bucket);
    expect(otherGuard.keys[5]).toBe(`${keys.workflow("u_1", "p_abc")}:other`);

    const faster = targets.get("u_1", "p_abc", "", "workflow", workflowGuard, { ...bucket, perSecond: 75 });
    expect(faster.shared.slice(4, 6)).toEqual(["75", "200"]);
    const deeper = targets.get("u_1", "p_abc", "", "workflow", workflowGuard, { ...bucket, burst: 300 });
    expect(deeper.shared.slice(4, 6)).toEqual(["50", "300"]);
    const elsewhere = targets.get("u_1", "p_abc", "", "workflow", workflowGuard, { ...bucket, key: keys.ingressRate("u_9") });
    expect(elsewhere.keys[6]).toBe(keys.ingressRate("u_9"));
    const free = targets.get("u_1", "p_abc", "", "workflow", workflowGuard, undefined);
    expect(free.keys[6]).toBe(free.keys[0]);
    expect(free.shared.slice(4, 6)).toEqual(["0", "0"]);
    const asSource = targets.get("u_1", "p_abc", "", "source", workflowGuard, undefined);
    expect(asSource.shared[3]).toBe("source");
    expect(targets.count).toBe(1);
  });

  it("starts over past its bound, and still answers right", () => {
    const targets = new RecordTargets(keys, undefined, 3);
    for (const e of ["p_1", "p_2", "p_3"]) targets.get("u_1", e, "", "workflow", undefined, undefined);
    expect(targets.count).toBe(3);
    const fourth = targets.get("u_1", "p_4", "", "workflow", undefined, undefined);
    expect(targets.count).toBe(1);
    expect(fourth.keys[0]).toBe(keys.events("u_1", "p_4", ""));
    expect(targets.get("u_1", "p_1", "", "workflow", undefined, undefined).keys[0]).toBe(keys.events("u_1", "p_1", ""));
    expect(targets.count).toBe(2);
  });

  it("refuses a guard that is the summary stream itself", () => {
    expect(() => new RecordTargets(keys).get("u_1", "p_abc", "", "workflow", (u, id) => keys.events(u, id, ""), undefined)).toThrow(
      /guard key cannot be the summary stream/,
    );
  });
});
