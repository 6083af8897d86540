import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { FilterBudgetReports } from "../../../src/events/filter-budget-report.js";
import type { OverBudgetEvent } from "../../../src/events/fanout-plan.js";
import type { EmitInput, RecordGuard } from "../../../src/events/ingest.js";
import type { OutboxEntry } from "../../../src/events/outbox.js";
import { createLogger } from "../../../src/observability/logger.js";
import { createKeys } from "../../../src/store/keys.js";

/** What the daemon records on an emitter's $errors when its filters ran out, and how often. */

interface Recorded {
  userId: string;
  emitterId: string;
  kind: string;
  emits: readonly EmitInput[];
  guardKey: string | undefined;
}

function setup(fail = false) {
  let now = 1_000_000;
  const recorded: Recorded[] = [];
  const reports = new FilterBudgetReports({
    ingest: {
      async recordFor(userId, emitterId, kind, emits, _hops, guard?: RecordGuard) {
        if (fail) throw new Error("redis down");
        recorded.push({ userId, emitterId, kind, emits, guardKey: guard?.keyOf(userId, emitterId) });
        return ["1-0"];
      },
    },
    keys: createKeys("t"),
    limits: { perEvent: 1_000_000, perSecondPerUser: 5_000_000 },
    logger: createLogger("silent"),
    randomBytes: (n) => randomBytes(n),
    now: () => now,
  });
  return { reports, recorded, advance: (ms: number) => (now += ms) };
}

const event = (over: Partial<OutboxEntry> = {}, limit: "event" | "user" = "event"): OverBudgetEvent => ({
  entry: {
    entryId: "9-1",
    userId: "u_1",
    emitterId: "p_orders",
    emitterKind: "workflow",
    channel: "",
    eventId: "100-1",
    acceptedAtMs: 1,
    hops: 0,
    payload: "{}",
    ...over,
  },
  listenerIds: ["wh_a", "dc_b"],
  limit,
});

describe("FilterBudgetReports", () => {
  it("records FILTER_BUDGET_EXCEEDED on the emitter's $errors, naming the event, the listeners and the bound, guarded by the emitter's record", async () => {
    const { reports, recorded } = setup();
    await reports.report([event()]);
    expect(recorded).toHaveLength(1);
    const [r] = recorded;
    expect(r).toMatchObject({
      userId: "u_1",
      emitterId: "p_orders",
      kind: "workflow",
      guardKey: createKeys("t").workflow("u_1", "p_orders"),
    });
    expect(r?.emits[0]?.name).toBe("$errors");
    expect(r?.emits[0]?.event).toMatchObject({
      error: { code: "FILTER_BUDGET_EXCEEDED", msg: expect.stringContaining("1,000,000 visits"), stack: "" },
      original_event: null,
      original_context: { emitter_id: "p_orders", event_id: "100-1", event_name: "", listener_ids: ["wh_a", "dc_b"], limit: "event" },
    });
    await reports.report([event({ emitterId: "dc_src", emitterKind: "source", userId: "u_2" }, "user")]);
    expect(recorded[1]?.guardKey).toBe(createKeys("t").source("u_2", "dc_src"));
    expect(recorded[1]?.emits[0]?.event).toMatchObject({ error: { msg: expect.stringContaining("5,000,000 visits per second") } });
  });

  it("records at most one per emitter a minute, and none for an event on $errors", async () => {
    const { reports, recorded, advance } = setup();
    await reports.report([event(), event({ eventId: "100-2" }), event({ emitterId: "p_other" })]);
    expect(recorded.map((r) => r.emitterId)).toEqual(["p_orders", "p_other"]);
    advance(59_000);
    await reports.report([event({ eventId: "100-3" })]);
    expect(recorded).toHaveLength(2);
    advance(1_000);
    await reports.report([event({ eventId: "100-4" }), event({ emitterId: "p_loop", channel: "$errors" })]);
    expect(recorded.map((r) => r.emitterId)).toEqual(["p_orders", "p_other", "p_orders"]);
  });

  it("never rejects when the record cannot be written", async () => {
    const { reports } = setup(true);
    await expect(reports.report([event()])).resolves.toBeUndefined();
  });
});
