/**
 * The circuit breaker of a webhook (SPEC §12), as pure rules: when an attempt may be made, and
 * what an attempt's result does to the circuit. The state lives in Redis, shared by every worker
 * process; store/scripts/circuit-admit.ts and circuit-record.ts apply these same rules atomically
 * (their test checks them against this module step by step).
 *
 * - closed: attempts go; each failure counts, a success resets the count. At `threshold`
 *   consecutive failures the circuit opens.
 * - open: no attempt until `nextProbeAtMs` (the cool-down, doubling per consecutive opening up to
 *   `maxCooldownMs`); deliveries wait without spending their retry budget. The first delivery
 *   turned away waits until `nextProbeAtMs`, to make the probe; the others wait
 *   `PROBE_HEAD_START_MS` longer, so that the probe has settled when they come due. Were they due
 *   with it, a backlog would find the circuit half open and wait once more, for the probe's
 *   success to release it: each delivery taken, put back and released for nothing.
 * - half open: the cool-down is over and one attempt, the probe, holds a lease until
 *   `probeUntilMs`. Its success closes the circuit, its failure opens it again. A probe whose
 *   process died lets its lease expire: the circuit is then open with its probe due, and the next
 *   attempt probes.
 *
 * Any success closes the circuit, also one of an attempt that started before it opened: the
 * receiver answered. Failures of such attempts count, but only the probe's failure reopens.
 */

export interface CircuitPolicy {
  /** Consecutive failed attempts that open the circuit (CIRCUIT_FAILURE_THRESHOLD). */
  readonly threshold: number;
  /** The first cool-down (CIRCUIT_COOLDOWN). */
  readonly cooldownMs: number;
  /** The longest cool-down. */
  readonly maxCooldownMs: number;
}

/** The longest cool-down (SPEC §12: doubling up to 1 h). */
export const MAX_CIRCUIT_COOLDOWN_MS = 3_600_000;

/** How much longer than the probe the other deliveries turned away by an open circuit wait. */
export const PROBE_HEAD_START_MS = 1_000;

export interface CircuitState {
  /** Consecutive failed attempts. */
  readonly failures: number;
  /** Consecutive openings (a failed probe reopens); 0 while closed. */
  readonly openings: number;
  /** When the circuit opened (the first opening of this outage); null while closed. */
  readonly openedAtMs: number | null;
  /** When the cool-down ends and a probe may go; null while closed. */
  readonly nextProbeAtMs: number | null;
  /** While a probe is in flight: when its lease ends. */
  readonly probeUntilMs: number | null;
  /** The probe's token (its delivery id): only its failure reopens the circuit. */
  readonly probeToken: string | null;
  /** The `nextProbeAtMs` for which a waiting delivery was picked to make the probe; null: none yet. */
  readonly proberForMs: number | null;
}

export const CLOSED: CircuitState = Object.freeze({
  failures: 0,
  openings: 0,
  openedAtMs: null,
  nextProbeAtMs: null,
  probeUntilMs: null,
  probeToken: null,
  proberForMs: null,
});

export type CircuitPhase = "closed" | "open" | "half_open";

/** The cool-down of the `openings`-th consecutive opening: doubled each time, at most the policy's max. */
export function cooldownFor(policy: CircuitPolicy, openings: number): number {
  const doubled = policy.cooldownMs * 2 ** Math.max(0, Math.min(openings - 1, 40));
  return Math.min(doubled, policy.maxCooldownMs);
}

export function phaseOf(s: CircuitState, nowMs: number): CircuitPhase {
  if (s.openings === 0) return "closed";
  return s.probeUntilMs !== null && nowMs < s.probeUntilMs ? "half_open" : "open";
}

/**
 * What an attempt may do: go, go as the probe (holding the lease), or wait until `untilMs`;
 * `prober`: it waits to make the next probe, so its wait must not be lengthened (spread).
 */
export type Admission =
  | { readonly kind: "send" }
  | { readonly kind: "probe"; readonly leaseUntilMs: number }
  | { readonly kind: "wait"; readonly untilMs: number; readonly prober?: true };

/** Admits an attempt (`token`: its delivery id) at `nowMs`; a probe takes a lease of `leaseMs`. */
export function admit(s: CircuitState, nowMs: number, leaseMs: number, token: string): { admission: Admission; next: CircuitState } {
  if (s.openings === 0) return { admission: { kind: "send" }, next: s };
  if (s.nextProbeAtMs !== null && nowMs < s.nextProbeAtMs) {
    if (s.proberForMs === s.nextProbeAtMs) return { admission: { kind: "wait", untilMs: s.nextProbeAtMs + PROBE_HEAD_START_MS }, next: s };
    return { admission: { kind: "wait", untilMs: s.nextProbeAtMs, prober: true }, next: { ...s, proberForMs: s.nextProbeAtMs } };
  }
  // The probe itself comes back (it waited for the rate limit, or its job was redone): it keeps the lease.
  if (s.probeUntilMs !== null && nowMs < s.probeUntilMs && s.probeToken !== token) {
    return { admission: { kind: "wait", untilMs: s.probeUntilMs }, next: s };
  }
  const leaseUntilMs = nowMs + leaseMs;
  return { admission: { kind: "probe", leaseUntilMs }, next: { ...s, probeUntilMs: leaseUntilMs, probeToken: token } };
}

/** What an attempt's result says about its receiver: `none` for answers that are not about health. */
export type CircuitSignal = "success" | "failure" | "none";

/**
 * The change a result made: `opened` from closed, `reopened` after a failed probe, `closed` from
 * open or half open.
 */
export type CircuitChange = "opened" | "reopened" | "closed";

/** Applies an attempt's result (`token`: its delivery id) at `nowMs`. */
export function afterAttempt(
  s: CircuitState,
  signal: CircuitSignal,
  token: string,
  nowMs: number,
  policy: CircuitPolicy,
): { next: CircuitState; change?: CircuitChange } {
  if (signal === "none") return { next: s };
  if (signal === "success") {
    if (s.openings > 0) return { next: CLOSED, change: "closed" };
    return { next: s.failures === 0 ? s : CLOSED };
  }
  const failures = s.failures + 1;
  if (s.openings === 0) {
    if (failures < policy.threshold) return { next: { ...s, failures } };
    return {
      next: {
        failures,
        openings: 1,
        openedAtMs: nowMs,
        nextProbeAtMs: nowMs + cooldownFor(policy, 1),
        probeUntilMs: null,
        probeToken: null,
        proberForMs: null,
      },
      change: "opened",
    };
  }
  if (s.probeToken !== token) return { next: { ...s, failures } };
  const openings = s.openings + 1;
  return {
    next: { ...s, failures, openings, nextProbeAtMs: nowMs + cooldownFor(policy, openings), probeUntilMs: null, probeToken: null },
    change: "reopened",
  };
}

/** What the attempt's verdict means for the circuit. Receiver-driven answers (410, webhook-delivery) are deliberate, not failures. */
export function circuitSignal(outcomeKind: "delivered" | "retry" | "give_up" | "deactivate", byReceiver: boolean): CircuitSignal {
  if (outcomeKind === "delivered") return "success";
  if (outcomeKind === "deactivate" || byReceiver) return "none";
  return "failure";
}

/**
 * The `circuit` of the webhook object: times in epoch seconds (as `created_at`), null while closed.
 * `next_probe_at` in the past means the probe is due (the next attempt makes it).
 */
export function circuitView(s: CircuitState, nowMs: number) {
  return {
    state: phaseOf(s, nowMs),
    consecutive_failures: s.failures,
    opened_at: s.openedAtMs === null ? null : Math.floor(s.openedAtMs / 1000),
    next_probe_at: s.nextProbeAtMs === null ? null : Math.ceil(s.nextProbeAtMs / 1000),
  };
}
