import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { admit, afterAttempt, CLOSED, type CircuitPolicy, type CircuitState, PROBE_HEAD_START_MS } from "../../../src/domain/circuit.js";
import { CircuitStore } from "../../../src/store/circuit.js";
import { createKeys } from "../../../src/store/keys.js";
import { sharedKeySpace } from "../../helpers/redis.js";

/**
 * The circuit scripts (store/scripts/circuit-admit.ts, circuit-record.ts) against real Redis: they
 * must apply domain/circuit.ts's rules exactly, step by step, and keep the waiting deliveries and
 * the open-circuit index.
 */

const space = sharedKeySpace();
const keys = createKeys(space.prefix);
const POLICY: CircuitPolicy = { threshold: 3, cooldownMs: 1_000, maxCooldownMs: 8_000 };
const LEASE = 500;
let n = 0;
const webhook = () => ({ userId: `u_store${++n}`, webhookId: `wh_store${n}` });

function storeAt(clock: { now: number }): CircuitStore {
  return new CircuitStore(space.redis(), keys, POLICY, () => clock.now);
}

type Step = { advanceMs: number } & ({ op: "admit"; token: string } | { op: "record"; success: boolean; token: string });

describe("circuit store (store/circuit.ts)", () => {
  it("applies the same transitions as domain/circuit.ts, step by step", async () => {
    const token = fc.constantFrom("d_a", "d_b", "d_c");
    const step: fc.Arbitrary<Step> = fc.oneof(
      fc.record({ advanceMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 3_000 })), op: fc.constant("admit" as const), token }),
      fc.record({ advanceMs: fc.integer({ min: 0, max: 600 }), op: fc.constant("record" as const), success: fc.boolean(), token }),
      // Failures weigh more: circuits must open and reopen often.
      fc.record({ advanceMs: fc.integer({ min: 0, max: 600 }), op: fc.constant("record" as const), success: fc.constant(false), token }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 40 }), async (steps) => {
        const { userId, webhookId } = webhook();
        const clock = { now: Date.UTC(2026, 0, 1) };
        const store = storeAt(clock);
        let model: CircuitState = CLOSED;
        for (const s of steps) {
          clock.now += s.advanceMs;
          if (s.op === "admit") {
            const expected = admit(model, clock.now, LEASE, s.token);
            const got = await store.admit(userId, webhookId, s.token, `job-${s.token}`, LEASE);
            expect(got.admission).toEqual(expected.admission);
            expect(got.clean).toBe(model.openings === 0 && model.failures === 0);
            model = expected.next;
          } else {
            const expected = afterAttempt(model, s.success ? "success" : "failure", s.token, clock.now, POLICY);
            const got = await store.record(userId, webhookId, s.success, s.token);
            expect(got.change).toEqual(expected.change);
            model = expected.next;
          }
          expect(await store.read(userId, webhookId)).toEqual(model);
        }
      }),
      { numRuns: 100 },
    );
  });

  it("parks the deliveries turned away and hands their job ids to the attempt that closes the circuit", async () => {
    const { userId, webhookId } = webhook();
    const clock = { now: Date.UTC(2026, 0, 1) };
    const store = storeAt(clock);
    // A probe lease longer than the wait a release skips (a wait that ends within a second).
    const PROBE_LEASE = 5_000;
    for (const t of ["d_1", "d_2", "d_3"]) await store.record(userId, webhookId, false, t);
    expect((await store.admit(userId, webhookId, "d_4", "d_4", LEASE)).admission).toEqual({
      kind: "wait",
      untilMs: clock.now + 1_000,
      prober: true,
    });
    expect((await store.admit(userId, webhookId, "d_5", "d_5-r1", LEASE)).admission).toEqual({
      kind: "wait",
      untilMs: clock.now + 1_000 + PROBE_HEAD_START_MS,
    });
    // Parked once, however often it is turned away.
    expect((await store.admit(userId, webhookId, "d_4", "d_4", LEASE)).admission).toMatchObject({ kind: "wait" });
    clock.now += 1_000;
    expect((await store.admit(userId, webhookId, "d_6", "d_6", PROBE_LEASE)).admission).toEqual({
      kind: "probe",
      leaseUntilMs: clock.now + PROBE_LEASE,
    });
    expect((await store.admit(userId, webhookId, "d_7", "d_7", PROBE_LEASE)).admission).toEqual({
      kind: "wait",
      untilMs: clock.now + PROBE_LEASE,
    });
    // The probe, back after waiting for the rate limit, keeps its lease.
    expect((await store.admit(userId, webhookId, "d_6", "d_6", PROBE_LEASE)).admission).toEqual({
      kind: "probe",
      leaseUntilMs: clock.now + PROBE_LEASE,
    });
    const closed = await store.record(userId, webhookId, true, "d_6");
    expect(closed.change).toBe("closed");
    // d_4 waited until now (the probe), d_5 for the probe's head start: their jobs are due, or
    // soon, and run by themselves; d_7 waits for the probe's lease, so its job is released.
    expect([...closed.released].sort()).toEqual(["d_7"]);
    expect(await space.redis().exists(keys.webhookCircuitWaiting(userId, webhookId), keys.webhookCircuit(userId, webhookId))).toBe(0);
  });

  it("does not stay half open when the probe's process died: its lease expires and the next attempt probes", async () => {
    const { userId, webhookId } = webhook();
    const clock = { now: Date.UTC(2026, 0, 1) };
    const store = storeAt(clock);
    for (const t of ["d_1", "d_2", "d_3"]) await store.record(userId, webhookId, false, t);
    clock.now += 1_000;
    expect((await store.admit(userId, webhookId, "d_dead", "d_dead", LEASE)).admission).toMatchObject({ kind: "probe" });
    clock.now += LEASE - 1;
    expect((await store.admit(userId, webhookId, "d_next", "d_next", LEASE)).admission).toMatchObject({ kind: "wait" });
    clock.now += 1;
    expect((await store.admit(userId, webhookId, "d_next", "d_next", LEASE)).admission).toEqual({
      kind: "probe",
      leaseUntilMs: clock.now + LEASE,
    });
    // The dead probe's late failure, should it come, no longer reopens the circuit.
    expect((await store.record(userId, webhookId, false, "d_dead")).change).toBeUndefined();
    expect((await store.record(userId, webhookId, false, "d_next")).change).toBe("reopened");
  });

  it("indexes open circuits for the gauge, and drops those that closed or were discarded", async () => {
    const clock = { now: Date.UTC(2026, 0, 1) };
    const store = storeAt(clock);
    const before = await store.countOpen();
    const a = webhook();
    const b = webhook();
    for (const w of [a, b]) for (const t of ["d_1", "d_2", "d_3"]) await store.record(w.userId, w.webhookId, false, t);
    expect(await store.countOpen()).toBe(before + 2);
    await store.record(a.userId, a.webhookId, true, "d_ok");
    expect(await store.countOpen()).toBe(before + 1);
    await store.admit(b.userId, b.webhookId, "d_w", "job-w", LEASE);
    expect(await store.discard(b.userId, b.webhookId)).toEqual(["job-w"]);
    expect(await store.countOpen()).toBe(before);
    expect(await store.read(b.userId, b.webhookId)).toEqual(CLOSED);
    // A member whose circuit vanished without its index entry (a process died in between) is dropped.
    await space.redis().zadd(keys.openCircuits(), clock.now, "u_gone wh_gone");
    expect(await store.countOpen()).toBe(before);
    expect(await space.redis().zscore(keys.openCircuits(), "u_gone wh_gone")).toBeNull();
  });
});
