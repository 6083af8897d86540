import { describe, expect, it } from "vitest";
import {
  admit,
  afterAttempt,
  CLOSED,
  type CircuitPolicy,
  type CircuitState,
  circuitSignal,
  circuitView,
  cooldownFor,
  MAX_CIRCUIT_COOLDOWN_MS,
  PROBE_HEAD_START_MS,
  phaseOf,
} from "../../../src/domain/circuit.js";

const POLICY: CircuitPolicy = { threshold: 3, cooldownMs: 30_000, maxCooldownMs: MAX_CIRCUIT_COOLDOWN_MS };
const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);
const LEASE = 20_000;

/** Applies `n` failures of non-probe attempts from `s`. */
function fail(s: CircuitState, n: number, nowMs = T0): { next: CircuitState; changes: string[] } {
  const changes: string[] = [];
  let next = s;
  for (let i = 0; i < n; i++) {
    const r = afterAttempt(next, "failure", `d_${i}`, nowMs, POLICY);
    next = r.next;
    if (r.change) changes.push(r.change);
  }
  return { next, changes };
}

describe("circuit breaker rules (domain/circuit.ts)", () => {
  it("counts consecutive failures and opens at the threshold, once", () => {
    const two = fail(CLOSED, 2);
    expect(two.changes).toEqual([]);
    expect(phaseOf(two.next, T0)).toBe("closed");
    expect(two.next.failures).toBe(2);
    const three = fail(two.next, 1);
    expect(three.changes).toEqual(["opened"]);
    expect(three.next).toMatchObject({ failures: 3, openings: 1, openedAtMs: T0, nextProbeAtMs: T0 + 30_000 });
    expect(phaseOf(three.next, T0)).toBe("open");
    // Stragglers' failures (attempts begun before it opened) count, but do not open it again.
    const more = fail(three.next, 2);
    expect(more.changes).toEqual([]);
    expect(more.next).toMatchObject({ failures: 5, openings: 1, nextProbeAtMs: T0 + 30_000 });
  });

  it("resets the count on a success while closed", () => {
    const { next } = fail(CLOSED, 2);
    expect(afterAttempt(next, "success", "d_x", T0, POLICY)).toEqual({ next: CLOSED });
    expect(fail(afterAttempt(next, "success", "d_x", T0, POLICY).next, 2).changes).toEqual([]);
    // Nothing changes for a success without failures, nor for results that say nothing of health.
    expect(afterAttempt(CLOSED, "success", "d_x", T0, POLICY).next).toBe(CLOSED);
    expect(afterAttempt(next, "none", "d_x", T0, POLICY).next).toBe(next);
  });

  it("turns attempts away during the cool-down, then admits one probe while its lease runs", () => {
    const open = fail(CLOSED, 3).next;
    expect(admit(CLOSED, T0, LEASE, "d_a").admission).toEqual({ kind: "send" });
    // The first delivery turned away waits to make the probe; the others give it a head start.
    const picked = admit(open, T0 + 29_000, LEASE, "d_a");
    expect(picked.admission).toEqual({ kind: "wait", untilMs: T0 + 30_000, prober: true });
    expect(admit(picked.next, T0 + 29_999, LEASE, "d_b").admission).toEqual({ kind: "wait", untilMs: T0 + 30_000 + PROBE_HEAD_START_MS });
    expect(admit(picked.next, T0 + 29_999, LEASE, "d_a").admission).toEqual({ kind: "wait", untilMs: T0 + 30_000 + PROBE_HEAD_START_MS });

    const probe = admit(open, T0 + 30_000, LEASE, "d_probe");
    expect(probe.admission).toEqual({ kind: "probe", leaseUntilMs: T0 + 30_000 + LEASE });
    expect(phaseOf(probe.next, T0 + 30_001)).toBe("half_open");
    // Everyone else waits for the lease; the probe itself (back after a rate-limit wait) keeps it.
    expect(admit(probe.next, T0 + 31_000, LEASE, "d_other").admission).toEqual({ kind: "wait", untilMs: T0 + 30_000 + LEASE });
    expect(admit(probe.next, T0 + 31_000, LEASE, "d_probe").admission).toEqual({ kind: "probe", leaseUntilMs: T0 + 31_000 + LEASE });
  });

  it("lets a dead probe's lease expire: the circuit is open again and the next attempt probes", () => {
    const probing = admit(fail(CLOSED, 3).next, T0 + 30_000, LEASE, "d_dead").next;
    const after = T0 + 30_000 + LEASE;
    expect(phaseOf(probing, after)).toBe("open");
    expect(admit(probing, after, LEASE, "d_next")).toMatchObject({ admission: { kind: "probe" }, next: { probeToken: "d_next" } });
  });

  it("closes on the probe's success, and on any success while open", () => {
    const open = fail(CLOSED, 3).next;
    const probing = admit(open, T0 + 30_000, LEASE, "d_probe").next;
    expect(afterAttempt(probing, "success", "d_probe", T0 + 30_500, POLICY)).toEqual({ next: CLOSED, change: "closed" });
    expect(afterAttempt(open, "success", "d_late", T0 + 1_000, POLICY)).toEqual({ next: CLOSED, change: "closed" });
  });

  it("reopens on the probe's failure, doubling the cool-down each time up to 1 h", () => {
    let s = fail(CLOSED, 3).next;
    let now = T0;
    const cooldowns: number[] = [(s.nextProbeAtMs as number) - now];
    for (let i = 0; i < 10; i++) {
      now = s.nextProbeAtMs as number;
      s = admit(s, now, LEASE, `d_probe${i}`).next;
      // Another attempt's failure while the probe runs does not reopen it.
      expect(afterAttempt(s, "failure", "d_other", now + 1, POLICY).change).toBeUndefined();
      const r = afterAttempt(s, "failure", `d_probe${i}`, now + 1_000, POLICY);
      expect(r.change).toBe("reopened");
      s = r.next;
      now += 1_000;
      cooldowns.push((s.nextProbeAtMs as number) - now);
      expect(s.openedAtMs).toBe(T0);
      expect(s.probeToken).toBeNull();
      // The next probe gets its own prober.
      expect(admit(s, now, LEASE, "d_waiting").admission).toEqual({ kind: "wait", untilMs: s.nextProbeAtMs, prober: true });
    }
    expect(cooldowns.slice(0, 8)).toEqual([30_000, 60_000, 120_000, 240_000, 480_000, 960_000, 1_920_000, 3_600_000]);
    expect(cooldowns.slice(8)).toEqual([3_600_000, 3_600_000, 3_600_000]);
    // A close resets the doubling.
    const reopened = fail(afterAttempt(s, "success", "d_ok", now, POLICY).next, 3, now);
    expect((reopened.next.nextProbeAtMs as number) - now).toBe(30_000);
  });

  it("caps the cool-down at the policy's maximum", () => {
    expect(cooldownFor({ threshold: 1, cooldownMs: 1_000, maxCooldownMs: 5_000 }, 1)).toBe(1_000);
    expect(cooldownFor({ threshold: 1, cooldownMs: 1_000, maxCooldownMs: 5_000 }, 3)).toBe(4_000);
    expect(cooldownFor({ threshold: 1, cooldownMs: 1_000, maxCooldownMs: 5_000 }, 4)).toBe(5_000);
    expect(cooldownFor({ threshold: 1, cooldownMs: 1_000, maxCooldownMs: 5_000 }, 10_000)).toBe(5_000);
  });

  it("reads results: a 2xx is a success, a retry or give-up a failure, receiver-driven answers neither", () => {
    expect(circuitSignal("delivered", false)).toBe("success");
    expect(circuitSignal("retry", false)).toBe("failure");
    expect(circuitSignal("give_up", false)).toBe("failure");
    expect(circuitSignal("give_up", true)).toBe("none");
    expect(circuitSignal("deactivate", true)).toBe("none");
  });

  it("shows the circuit with times in epoch seconds, null while closed", () => {
    expect(circuitView(CLOSED, T0)).toEqual({ state: "closed", consecutive_failures: 0, opened_at: null, next_probe_at: null });
    const open = fail(CLOSED, 3, T0 + 400).next;
    expect(circuitView(open, T0 + 500)).toEqual({
      state: "open",
      consecutive_failures: 3,
      opened_at: T0 / 1000,
      next_probe_at: (T0 + 31_000) / 1000,
    });
    const probing = admit(open, T0 + 30_400, LEASE, "d_p").next;
    expect(circuitView(probing, T0 + 30_500).state).toBe("half_open");
  });
});
