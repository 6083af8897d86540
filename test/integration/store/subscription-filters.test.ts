import { describe, expect, it } from "vitest";
import { installPipeline, newUserId, w } from "../../helpers/pipeline.js";

/**
 * The filter of a stored subscription (store/subscriptions.ts, scripts/subscription-create.ts):
 * swapped as text inside the record when the triple is posted again, so every JSON value survives
 * as given, and records written before filters existed read and take a filter like new ones.
 */

installPipeline();

describe("stored subscription filters", () => {
  it("replaces only the filter of an existing record, keeping every value as given", async () => {
    const userId = newUserId();
    const first = await w.subscriptions.create(userId, "p_orders", "wh_111111111111", "", { kind: "a" });
    // Empty arrays and objects (cjson would turn [] into {}), a nested "filter" key, odd strings.
    const odd = { tags: { $in: [[], {}] }, "meta.filter": { $eq: { filter: ',"filter":' } }, $or: [{ n: { $gte: 1.5 } }, { s: 'é"\\' }] };
    const again = await w.subscriptions.create(userId, "p_orders", "wh_111111111111", "default", odd);
    expect(again).toEqual({ ...first, filter: odd });
    expect(await w.subscriptions.get(userId, first.id)).toEqual({ ...first, filter: odd });
    // The old filter is gone from the text, not shadowed by a second key.
    expect(await w.redis.hget(w.keys.subscriptions(userId), first.id)).toBe(JSON.stringify({ ...first, filter: odd }));
    expect(await w.subscriptions.matching(userId, "p_orders", "")).toEqual([{ ...first, filter: odd }]);
    expect(await w.subscriptions.create(userId, "p_orders", "wh_111111111111", "")).toEqual({ ...first, filter: odd });
    expect(await w.subscriptions.create(userId, "p_orders", "wh_111111111111", "", null)).toEqual({ ...first, filter: null });
  });

  it("reads a record written before filters existed as filter: null, and gives it a filter when re-posted", async () => {
    const userId = newUserId();
    const sub = await w.subscriptions.create(userId, "p_orders", "wh_111111111111", "orders");
    const { filter: _, ...old } = sub;
    await w.redis.hset(w.keys.subscriptions(userId), sub.id, JSON.stringify(old));
    expect(await w.subscriptions.list(userId)).toEqual([{ ...old, filter: null }]);
    expect(await w.subscriptions.matching(userId, "p_orders", "orders")).toEqual([{ ...old, filter: null }]);
    const updated = await w.subscriptions.create(userId, "p_orders", "wh_111111111111", "orders", { n: 1 });
    expect(updated).toEqual({ ...old, filter: { n: 1 } });
    expect(await w.subscriptions.get(userId, sub.id)).toEqual({ ...old, filter: { n: 1 } });
  });
});
