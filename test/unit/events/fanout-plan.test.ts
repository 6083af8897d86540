import { describe, expect, it } from "vitest";
import { deliveryIdFor, listenerKindOf, sourceRunIdFor } from "../../../src/domain/ids.js";
import { FilterBudgets } from "../../../src/domain/filter-budget.js";
import { FilterPredicates } from "../../../src/domain/subscription-filter.js";
import { type MatchedListener, matchedListeners, planFanout, planLookups, uniqueListeners } from "../../../src/events/fanout-plan.js";
import { OUTBOX_FIELDS, type OutboxEntry, parseOutboxEntry } from "../../../src/events/outbox.js";
import { RECORD_EVENTS } from "../../../src/store/scripts/record-events.js";

/** Fan-out's decisions without Redis: the outbox wire format, the lookups, and the jobs of a batch. */

const unfiltered = (ids: readonly string[]): MatchedListener[] => ids.map((listenerId) => ({ listenerId, accepts: null }));

const entry = (n: number, over: Partial<OutboxEntry> = {}): OutboxEntry => ({
  entryId: `9-${n}`,
  userId: "u_1",
  emitterId: "p_orders",
  emitterKind: "workflow",
  channel: "",
  eventId: `100-${n}`,
  acceptedAtMs: 500 + n,
  hops: 0,
  payload: `{"n":${n}}`,
  ...over,
});

describe("outbox wire format", () => {
  it("parses the fields the record script writes", () => {
    const fields = ["u", "u_1", "e", "p_orders", "c", "", "i", "100-1", "t", "501", "h", "2", "k", "source", "p", '{"n":1}'];
    expect(parseOutboxEntry("9-1", fields)).toEqual(entry(1, { hops: 2, emitterKind: "source" }));
  });

  it("reads entries of older versions without accepted-at, hops or emitter kind", () => {
    expect(parseOutboxEntry("9-1", ["u", "u_1", "e", "p_orders", "c", "", "i", "100-1", "p", '{"n":1}'])).toEqual(
      entry(1, { acceptedAtMs: 0 }),
    );
  });

  it("refuses an entry that lacks what a delivery needs", () => {
    expect(parseOutboxEntry("9-1", ["u", "u_1", "e", "p_orders", "c", "", "i", "100-1"])).toBeUndefined();
    expect(parseOutboxEntry("9-1", ["e", "p_orders", "c", "", "i", "100-1", "p", "{}"])).toBeUndefined();
  });

  it("is what RECORD_EVENTS.lua writes: the same fields in the same order", () => {
    const xadd = RECORD_EVENTS.lua.split("\n").find((line) => line.includes("XADD', KEYS[2]"));
    expect([...(xadd ?? "").matchAll(/'([a-z])', (?:ARGV|id)/g)].map((m) => m[1])).toEqual([...OUTBOX_FIELDS]);
  });
});

describe("listener ids", () => {
  it("name their kind by prefix", () => {
    expect(["wh_1", "p_flow", "dc_src", "u_1", "sub_1"].map(listenerKindOf)).toEqual([
      "webhook",
      "workflow",
      "source",
      undefined,
      undefined,
    ]);
  });

  it("give deterministic delivery and source-run ids from one hash of the event and listener", () => {
    const e = entry(1);
    expect(deliveryIdFor(e, "wh_1")).toMatch(/^d_[0-9a-f]{24}$/);
    expect(deliveryIdFor({ ...e }, "wh_1")).toBe(deliveryIdFor(e, "wh_1"));
    expect(deliveryIdFor(e, "wh_2")).not.toBe(deliveryIdFor(e, "wh_1"));
    expect(deliveryIdFor({ ...e, channel: "other" }, "wh_1")).not.toBe(deliveryIdFor(e, "wh_1"));
    expect(sourceRunIdFor(e, "dc_src")).toBe(deliveryIdFor(e, "dc_src").replace(/^d_/, "run_"));
  });
});

describe("planLookups", () => {
  it("shares one lookup between the entries of one user, emitter and channel", () => {
    const entries = [entry(1), entry(2, { channel: "x" }), entry(3), entry(4, { userId: "u_2" }), entry(5, { channel: "x" })];
    const { lookups, lookupOf } = planLookups(entries);
    expect(lookups).toEqual([
      { userId: "u_1", emitterId: "p_orders", channel: "" },
      { userId: "u_1", emitterId: "p_orders", channel: "x" },
      { userId: "u_2", emitterId: "p_orders", channel: "" },
    ]);
    expect(lookupOf).toEqual([0, 1, 0, 2, 1]);
  });
});

describe("planFanout", () => {
  it("makes one delivery per webhook or workflow and one source run per source, each listener once", () => {
    const subs = ["wh_a", "p_flow", "wh_a", "dc_src", "sub_weird"].map((listener_id) => ({ listener_id }));
    const listeners = uniqueListeners(subs);
    expect(listeners).toEqual(["wh_a", "p_flow", "dc_src", "sub_weird"]);
    const e1 = entry(1);
    const e2 = entry(2, { emitterKind: "source", emitterId: "dc_up", hops: 3 });
    const plan = planFanout([e1, e2], [unfiltered(listeners), unfiltered(["dc_src"])], "fanout");
    expect(plan.counts).toEqual({ webhook: 1, workflow: 1, source: 2 });
    expect(plan.deliveries.map((d) => [d.listenerId, d.listenerKind, d.deliveryId, d.origin, d.priorAttempts])).toEqual([
      ["wh_a", "webhook", deliveryIdFor(e1, "wh_a"), "fanout", 0],
      ["p_flow", "workflow", deliveryIdFor(e1, "p_flow"), "fanout", 0],
    ]);
    expect(plan.deliveries[0]).toMatchObject({ userId: "u_1", eventId: "100-1", payload: '{"n":1}', acceptedAtMs: 501, channel: "" });
    expect(plan.entryOf).toEqual(["9-1", "9-1"]);
    // A source's hop count grows only when the emitter is a source.
    expect(plan.sourceRuns).toEqual([
      {
        id: sourceRunIdFor(e1, "dc_src"),
        data: {
          kind: "event",
          userId: "u_1",
          sourceId: "dc_src",
          emitterId: "p_orders",
          channel: "",
          eventId: "100-1",
          payload: '{"n":1}',
          hops: 0,
          acceptedAtMs: 501,
        },
      },
      {
        id: sourceRunIdFor(e2, "dc_src"),
        data: {
          kind: "event",
          userId: "u_1",
          sourceId: "dc_src",
          emitterId: "dc_up",
          channel: "",
          eventId: "100-2",
          payload: '{"n":2}',
          hops: 4,
          acceptedAtMs: 502,
        },
      },
    ]);
  });

  it("counts a webhook's health event as a hop and carries hops into its deliveries (no endless loops, SPEC §12)", () => {
    const health = entry(1, { emitterKind: "webhook", emitterId: "wh_failing", channel: "$delivery_failed", hops: 5 });
    const fromSource = entry(2, { emitterKind: "source", emitterId: "dc_up", hops: 3 });
    const plan = planFanout(
      [health, fromSource, entry(3)],
      [unfiltered(["dc_echo", "wh_pager"]), unfiltered(["wh_failing"]), unfiltered(["wh_failing"])],
      "fanout",
    );
    expect(plan.sourceRuns.map((r) => [r.data.kind === "event" && r.data.emitterId, r.data.kind === "event" && r.data.hops])).toEqual([
      ["wh_failing", 6],
    ]);
    expect(plan.deliveries.map((d) => [d.listenerId, d.emitterId, d.hops])).toEqual([
      ["wh_pager", "wh_failing", 5],
      ["wh_failing", "dc_up", 3],
      ["wh_failing", "p_orders", undefined],
    ]);
  });

  it("plans a taken-over batch as redo jobs with the same ids", () => {
    const plan = planFanout([entry(1)], [unfiltered(["wh_a"])], "fanout");
    const redo = planFanout([entry(1)], [unfiltered(["wh_a"])], "redo");
    expect(redo.deliveries.map((d) => d.deliveryId)).toEqual(plan.deliveries.map((d) => d.deliveryId));
    expect(redo.deliveries[0]).toMatchObject({ origin: "redo", priorAttempts: 0, redo: true });
    expect(plan.deliveries[0]?.redo).toBeUndefined();
  });

  it("plans nothing for entries that matched no listener", () => {
    expect(planFanout([entry(1), entry(2)], [[], []], "fanout")).toEqual({
      deliveries: [],
      entryOf: [],
      sourceRuns: [],
      counts: { webhook: 0, workflow: 0, source: 0 },
      filtered: { webhook: 0, workflow: 0, source: 0 },
      filteredFor: [],
      overBudget: { webhook: 0, workflow: 0, source: 0 },
      overBudgetEvents: [],
    });
  });

  it("leaves out the listeners whose filter refuses the event, counting them filtered by kind", () => {
    const predicates = new FilterPredicates();
    const big = { n: { $gte: 2 } };
    const listeners = matchedListeners(
      [
        { listener_id: "wh_big", filter: big },
        { listener_id: "dc_big", filter: big },
        { listener_id: "p_all", filter: null },
      ],
      predicates,
    );
    const plan = planFanout([entry(1), entry(2)], [listeners, listeners], "fanout");
    expect(plan.deliveries.map((d) => [d.eventId, d.listenerId])).toEqual([
      ["100-1", "p_all"],
      ["100-2", "wh_big"],
      ["100-2", "p_all"],
    ]);
    expect(plan.sourceRuns.map((r) => r.id)).toEqual([sourceRunIdFor(entry(2), "dc_big")]);
    expect(plan.counts).toEqual({ webhook: 1, workflow: 2, source: 1 });
    expect(plan.filtered).toEqual({ webhook: 1, workflow: 0, source: 1 });
    // Per listener too, for the counts people read (GET /v1/webhooks/{id}).
    expect(plan.filteredFor).toEqual([
      { userId: "u_1", listenerId: "wh_big", eventId: "100-1" },
      { userId: "u_1", listenerId: "dc_big", eventId: "100-1" },
    ]);
  });

  it("matches a listener when any of its subscriptions does, unfiltered when one has no filter", () => {
    const predicates = new FilterPredicates();
    const either = matchedListeners(
      [
        { listener_id: "wh_a", filter: { n: 1 } },
        { listener_id: "wh_a", filter: { n: 3 } },
      ],
      predicates,
    );
    const plan = planFanout([entry(1), entry(2), entry(3)], [either, either, either], "fanout");
    expect(plan.deliveries.map((d) => d.eventId)).toEqual(["100-1", "100-3"]);
    expect(plan.filtered.webhook).toBe(1);
    const open = matchedListeners(
      [
        { listener_id: "wh_a", filter: { n: 1 } },
        { listener_id: "wh_a", filter: null },
      ],
      predicates,
    );
    expect(open).toEqual([{ listenerId: "wh_a", accepts: null }]);
  });

  it("compiles each distinct filter once, however many batches use it", () => {
    const predicates = new FilterPredicates();
    const subs = [
      { listener_id: "wh_a", filter: { n: 1 } },
      { listener_id: "wh_b", filter: { n: 1 } },
    ];
    const first = matchedListeners(subs, predicates);
    const second = matchedListeners(structuredClone(subs), predicates);
    expect(predicates.size).toBe(1);
    expect(second[0]?.accepts).toBe(first[0]?.accepts);
    expect(second[1]?.accepts).toBe(first[0]?.accepts);
  });

  describe("within the filter budget", () => {
    /** One `$or` of 20 `$contains` that never match, on `items`. */
    const costly = { $or: Array.from({ length: 20 }, (_, i) => ({ items: { $contains: `absent-${i}` } })) };
    const bigEntry = (n: number, over: Partial<OutboxEntry> = {}) =>
      entry(n, { payload: JSON.stringify({ n, items: new Array(1000).fill(0) }), ...over });

    it("keeps the event from the listeners whose filters ran out of the event's visits, and names them", () => {
      const listeners = matchedListeners(
        [
          { listener_id: "wh_cheap", filter: { n: 1 } },
          { listener_id: "wh_costly", filter: costly },
          { listener_id: "dc_after", filter: { n: 1 } },
          { listener_id: "p_all", filter: null },
        ],
        new FilterPredicates(),
      );
      const budgets = new FilterBudgets({ perEvent: 5000, perSecondPerUser: 0 });
      const plan = planFanout([bigEntry(1)], [listeners], "fanout", { budgets, nowMs: 0 });
      // The cheap filter before the costly one answered; the one after found the event's visits spent.
      expect(plan.deliveries.map((d) => d.listenerId)).toEqual(["wh_cheap", "p_all"]);
      expect(plan.sourceRuns).toEqual([]);
      expect(plan.overBudget).toEqual({ webhook: 1, workflow: 0, source: 1 });
      expect(plan.filtered).toEqual({ webhook: 0, workflow: 0, source: 0 });
      expect(plan.overBudgetEvents).toEqual([{ entry: bigEntry(1), listenerIds: ["wh_costly", "dc_after"], limit: "event" }]);
      // Without a budget the same plan delivers by the filters' answers.
      const free = planFanout([bigEntry(1)], [listeners], "fanout");
      expect(free.deliveries.map((d) => d.listenerId)).toEqual(["wh_cheap", "p_all"]);
      expect(free.filtered).toEqual({ webhook: 1, workflow: 0, source: 0 });
      expect(free.sourceRuns.map((r) => r.data.sourceId)).toEqual(["dc_after"]);
    });

    it("charges the emitting user: once their second's worth is spent their filters answer too costly, another user's do not", () => {
      const listeners = matchedListeners([{ listener_id: "wh_a", filter: costly }], new FilterPredicates());
      const budgets = new FilterBudgets({ perEvent: 100_000, perSecondPerUser: 50_000 });
      const a = Array.from({ length: 5 }, (_, i) => bigEntry(i + 1, { userId: "u_a" }));
      const b = bigEntry(9, { userId: "u_b" });
      const plan = planFanout(
        [...a, b],
        [...a, b].map(() => listeners),
        "fanout",
        { budgets, nowMs: 0 },
      );
      // Each of A's events spends 20 × 1,000 visits: two fit in 50,000, the third runs out.
      expect(plan.filtered.webhook).toBe(3);
      expect(plan.overBudgetEvents.map((e) => [e.entry.userId, e.entry.eventId, e.limit])).toEqual([
        ["u_a", "100-3", "user"],
        ["u_a", "100-4", "user"],
        ["u_a", "100-5", "user"],
      ]);
      // A second later A's allowance is whole again.
      const later = planFanout([bigEntry(6, { userId: "u_a" })], [listeners], "fanout", { budgets, nowMs: 1000 });
      expect(later.filtered.webhook).toBe(1);
      expect(later.overBudgetEvents).toEqual([]);
    });

    it("reads no payload for a user with nothing left", () => {
      const listeners = matchedListeners([{ listener_id: "wh_a", filter: { n: 1 } }], new FilterPredicates());
      const budgets = new FilterBudgets({ perEvent: 1000, perSecondPerUser: 1000 });
      budgets.spend("u_1", 5000, 0);
      // Not JSON: read, it would simply match nothing (filtered); unread, it is over budget.
      const plan = planFanout([entry(1, { payload: "{not json" })], [listeners], "fanout", { budgets, nowMs: 0 });
      expect(plan.filtered.webhook).toBe(0);
      expect(plan.overBudget.webhook).toBe(1);
    });
  });
});
