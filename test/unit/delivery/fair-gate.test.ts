import { Registry } from "prom-client";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { FairGate, type Entry } from "../../../src/delivery/fair-gate.js";
import { createMetrics } from "../../../src/observability/metrics.js";
import type { DeliveryJob } from "../../../src/queue/catalog.js";

/** The per-process gate around FairSlots: bounded waits and put-offs, timers faked. */
describe("FairGate", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const job = (userId: string, listenerId: string): DeliveryJob =>
    ({ userId, listenerId, listenerKind: "webhook", deliveryId: `d_${userId}_${listenerId}` }) as DeliveryJob;

  function gate(opts: { directSlots?: number; perUser?: number; perDestination?: number } = {}) {
    const registry = new Registry();
    const metrics = createMetrics(registry);
    const g = new FairGate({
      directSlots: opts.directSlots ?? 10,
      perUser: opts.perUser ?? 0,
      perDestination: opts.perDestination ?? 0,
      clogMs: 100,
      // Two webhooks on one host share a destination.
      destinationOf: (j) => (j.listenerId.startsWith("wh_dead") ? "http://dead" : `http://${j.listenerId}`),
      metrics,
    });
    const capped = async () => (await metrics.deliveries.get()).values.find((v) => v.labels.outcome === "capped")?.value ?? 0;
    return { g, capped };
  }

  const ticketOf = (e: Entry) => {
    if (!("ticket" in e)) throw new Error(`blocked by ${e.blockedBy}`);
    return e.ticket;
  };

  it("puts a delivery off at once when its destination's slots are held by slow attempts, whoever sends", async () => {
    const { g, capped } = gate({ perDestination: 2 });
    ticketOf(await g.enter(job("a", "wh_dead1"), "direct"));
    ticketOf(await g.enter(job("a", "wh_dead2"), "queue"));
    await vi.advanceTimersByTimeAsync(150); // both attempts now count as slow
    expect(await g.enter(job("b", "wh_dead1"), "queue")).toEqual({ blockedBy: "destination" });
    // Another destination is untouched.
    ticketOf(await g.enter(job("b", "wh_ok"), "queue"));
    expect(await capped()).toBe(1);
  });

  it("waits for a slot held by quick attempts, and gets it when one is released", async () => {
    const { g } = gate({ perUser: 1 });
    const first = ticketOf(await g.enter(job("a", "wh_1"), "direct"));
    const waiting = g.enter(job("a", "wh_2"), "queue");
    await vi.advanceTimersByTimeAsync(30);
    first.release();
    first.release(); // idempotent: frees one slot only
    const second = ticketOf(await waiting);
    expect(g.inFlight("queue")).toBe(1);
    second.release();
    expect(g.inFlight("queue")).toBe(0);
  });

  it("never makes fan-out wait for a user's or destination's slot under a cap below the direct pool (it queues the delivery)", async () => {
    const { g } = gate({ perUser: 1, perDestination: 1 });
    ticketOf(await g.enter(job("a", "wh_1"), "queue"));
    // The user's attempt is young (a quick destination): the worker would wait, fan-out does not.
    expect(await g.enter(job("a", "wh_2"), "direct")).toEqual({ blockedBy: "user" });
    ticketOf(await g.enter(job("b", "wh_3"), "queue"));
    expect(await g.enter(job("c", "wh_3"), "direct")).toEqual({ blockedBy: "destination" });
  });

  it("makes fan-out wait, as for a full pool, for a destination cap at or above the direct pool whose slots queued attempts hold", async () => {
    // The defaults' shape: the destination cap equals the direct pool.
    const { g, capped } = gate({ directSlots: 2, perDestination: 2 });
    const queued = ticketOf(await g.enter(job("a", "wh_dead1"), "queue"));
    ticketOf(await g.enter(job("a", "wh_dead2"), "queue"));
    const waiting = g.enter(job("b", "wh_dead1"), "direct");
    await vi.advanceTimersByTimeAsync(20);
    queued.release();
    ticketOf(await waiting);
    expect(g.inFlight("direct")).toBe(1);
    // Slow holders still mean no wait: past the clog time fan-out queues at once.
    await vi.advanceTimersByTimeAsync(150);
    expect(await g.enter(job("c", "wh_dead2"), "direct")).toEqual({ blockedBy: "destination" });
    expect(await capped()).toBe(0);
  });

  it("makes fan-out wait the same way for a user cap at or above the direct pool", async () => {
    const { g } = gate({ directSlots: 2, perUser: 2 });
    const queued = ticketOf(await g.enter(job("a", "wh_1"), "queue"));
    ticketOf(await g.enter(job("a", "wh_2"), "queue"));
    const waiting = g.enter(job("a", "wh_3"), "direct");
    await vi.advanceTimersByTimeAsync(20);
    queued.release();
    ticketOf(await waiting);
    expect(g.inFlight("direct")).toBe(1);
  });

  it("lets fan-out start a user's delivery to a free destination while another of the user's waits for a busy one", async () => {
    const { g } = gate({ perDestination: 1 });
    const busy = ticketOf(await g.enter(job("a", "wh_dead1"), "queue"));
    const waiting = g.enter(job("a", "wh_dead2"), "queue"); // same host: waits
    await vi.advanceTimersByTimeAsync(10);
    ticketOf(await g.enter(job("a", "wh_ok"), "direct")).release();
    busy.release();
    ticketOf(await waiting).release();
  });

  it("gives up a wait when no slot frees before the attempts holding it turn slow", async () => {
    const { g, capped } = gate({ perUser: 1 });
    ticketOf(await g.enter(job("a", "wh_1"), "direct"));
    const waiting = g.enter(job("a", "wh_2"), "queue");
    await vi.advanceTimersByTimeAsync(100);
    expect(await waiting).toEqual({ blockedBy: "user" });
    expect(await capped()).toBe(1);
    // On the direct path fan-out queues it: counted once, where the worker puts it off.
    await vi.advanceTimersByTimeAsync(100);
    expect(await g.enter(job("a", "wh_3"), "direct")).toEqual({ blockedBy: "user" });
    expect(await capped()).toBe(1);
  });

  it("reports a full direct pool as such (not counted as capped)", async () => {
    const { g, capped } = gate({ directSlots: 1 });
    ticketOf(await g.enter(job("a", "wh_1"), "direct"));
    await vi.advanceTimersByTimeAsync(150);
    expect(await g.enter(job("b", "wh_2"), "direct")).toEqual({ blockedBy: "pool" });
    expect(await capped()).toBe(0);
  });

  it("serves waiting users in turn", async () => {
    const { g } = gate({ directSlots: 1 });
    let held = ticketOf(await g.enter(job("seed", "wh_0"), "direct"));
    const order: string[] = [];
    const waits = [job("noisy", "wh_1"), job("noisy", "wh_2"), job("noisy", "wh_3"), job("quiet", "wh_4")].map((j) =>
      g.enter(j, "direct").then((e) => {
        order.push(j.listenerId);
        return e;
      }),
    );
    await vi.advanceTimersByTimeAsync(1);
    for (const w of [waits[0], waits[3], waits[1], waits[2]]) {
      held.release();
      held = ticketOf(await (w as Promise<Entry>));
    }
    expect(order).toEqual(["wh_1", "wh_4", "wh_2", "wh_3"]);
  });

  it("remembers each listener's destination, reads it again in the background past the TTL, and falls back to the listener when the read fails", async () => {
    const reads: string[] = [];
    let url = "http://first";
    let failing = false;
    const g = new FairGate({
      directSlots: 10,
      perUser: 0,
      perDestination: 1,
      clogMs: 100,
      destinationTtlMs: 1000,
      destinationOf: async (j) => {
        reads.push(j.listenerId);
        if (failing) throw new Error("redis down");
        return url;
      },
      metrics: createMetrics(new Registry()),
    });
    const first = ticketOf(await g.enter(job("a", "wh_1"), "queue"));
    first.release();
    ticketOf(await g.enter(job("a", "wh_1"), "queue")).release();
    expect(reads).toEqual(["wh_1"]); // remembered
    // Past the TTL: the remembered destination is used now, and read again meanwhile.
    url = "http://second";
    await vi.advanceTimersByTimeAsync(1500);
    const held = ticketOf(await g.enter(job("a", "wh_1"), "queue"));
    expect(reads).toEqual(["wh_1", "wh_1"]);
    await vi.advanceTimersByTimeAsync(150);
    held.release();
    // The new destination is what counts now: wh_1 holds "http://second", where wh_other also goes.
    const now = ticketOf(await g.enter(job("a", "wh_1"), "queue"));
    await vi.advanceTimersByTimeAsync(150);
    expect(await g.enter(job("b", "wh_other"), "queue")).toEqual({ blockedBy: "destination" });
    now.release();
    // A failed read: the attempt counts on its listener alone.
    failing = true;
    ticketOf(await g.enter(job("c", "wh_new"), "queue"));
    await vi.advanceTimersByTimeAsync(150);
    expect(await g.enter(job("c", "wh_new"), "queue")).toEqual({ blockedBy: "destination" });
    ticketOf(await g.enter(job("d", "wh_new2"), "queue"));
  });
});
