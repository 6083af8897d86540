import { setTimeout as sleep } from "node:timers/promises";
import type { Job } from "bullmq";
import type { Admission, CircuitChange } from "../domain/circuit.js";
import type { Logger } from "../observability/logger.js";
import { type CircuitStore, circuitChangeMessage } from "../store/circuit.js";
import type { CircuitHints } from "../store/circuit-hints.js";

/**
 * The circuit breakers as the Attempter uses them (domain/circuit.ts, store/circuit.ts), and the
 * release of the deliveries that waited on an open circuit.
 *
 * Waiting: an attempt the circuit turns away becomes a delayed job (as over a rate limit: no
 * attempt counted), until the probe is due, and its job id is parked with the webhook's circuit in
 * the same step. The process whose attempt closes the circuit takes the parked ids in that same
 * step too and promotes their jobs, so they run at once instead of at the end of their delay (the
 * webhook's rate limit then spaces them as any other attempts). A job parked by an attempt that
 * has not yet moved it to delayed (or, for a direct first attempt, added it) cannot be promoted
 * yet: the release tries again for a few seconds; a job it misses still runs at the end of its
 * delay, at most the cool-down.
 */
export interface CircuitBreakerDeps {
  store: Pick<CircuitStore, "admit" | "record" | "discard">;
  /** The delivery queue's jobs, to promote the released ones. */
  jobs: { getJob(id: string): Promise<Pick<Job, "promote" | "isActive"> | undefined> };
  /** DELIVERY_TIMEOUT_MS: a probe's lease is its timeout (the webhook's own, or this) plus a margin. */
  deliveryTimeoutMs: number;
  /**
   * Webhooks this process knows to have a clean circuit (store/circuit-hints.ts): their attempts
   * skip the admission and, on success, the record, so a healthy webhook costs no Redis call.
   * Without it, every attempt is admitted and recorded in Redis.
   */
  hints?: Pick<CircuitHints, "isClean" | "version" | "markClean" | "forget">;
  logger: Logger;
}

const SEND: Admission = Object.freeze({ kind: "send" });

/** How long past its timeout a probe's lease lasts (its result is recorded right after the answer). */
export const PROBE_LEASE_MARGIN_MS = 5_000;
/** The release's tries at promoting a job that is not delayed yet. */
const RELEASE_RETRIES_MS = [250, 1000, 3000];
const RELEASE_CONCURRENCY = 32;

export class CircuitBreaker {
  private closed = false;

  constructor(private readonly d: CircuitBreakerDeps) {}

  /** Admits an attempt of delivery `token`, carried by job `jobId`; a probe's lease covers `timeoutMs`. */
  async admit(userId: string, webhookId: string, token: string, jobId: string, timeoutMs: number | null | undefined): Promise<Admission> {
    const { hints } = this.d;
    if (hints?.isClean(userId, webhookId)) return SEND;
    const version = hints?.version() ?? 0;
    const leaseMs = (timeoutMs ?? this.d.deliveryTimeoutMs) + PROBE_LEASE_MARGIN_MS;
    const { admission, clean } = await this.d.store.admit(userId, webhookId, token, jobId, leaseMs);
    if (clean) hints?.markClean(userId, webhookId, version);
    return admission;
  }

  /** Applies an attempt's result; on closing, releases the waiting deliveries (not awaited). */
  async record(userId: string, webhookId: string, success: boolean, token: string): Promise<CircuitChange | undefined> {
    const { hints } = this.d;
    // A success on a clean circuit changes nothing.
    if (success && hints?.isClean(userId, webhookId)) return undefined;
    if (!success) hints?.forget(circuitChangeMessage(userId, webhookId));
    const version = hints?.version() ?? 0;
    const { change, released } = await this.d.store.record(userId, webhookId, success, token);
    // Any success leaves the circuit closed without failures.
    if (success) hints?.markClean(userId, webhookId, version);
    if (released.length > 0) void this.release(released);
    return change;
  }

  /** A deleted webhook: its waiting deliveries run now (they find it gone and end). */
  async discard(userId: string, webhookId: string): Promise<void> {
    const waiting = await this.d.store.discard(userId, webhookId);
    if (waiting.length > 0) void this.release(waiting);
  }

  /** Promotes the delayed jobs of `jobIds`; resolves when done or given up. Never throws. */
  async release(jobIds: readonly string[]): Promise<void> {
    let pending = jobIds;
    for (let round = 0; pending.length > 0 && !this.closed; round++) {
      const left: string[] = [];
      for (let i = 0; i < pending.length; i += RELEASE_CONCURRENCY) {
        const batch = pending.slice(i, i + RELEASE_CONCURRENCY);
        const done = await Promise.all(batch.map((id) => this.promote(id)));
        batch.forEach((id, j) => {
          if (!done[j]) left.push(id);
        });
      }
      const wait = RELEASE_RETRIES_MS[round];
      if (left.length === 0 || wait === undefined) {
        if (left.length > 0)
          this.d.logger.debug({ jobs: left.length }, "circuit closed: some waiting deliveries run at the end of their delay");
        return;
      }
      pending = left;
      await sleep(wait, undefined, { ref: false });
    }
  }

  /** True when the job no longer needs promoting (promoted, already running again, or finished). */
  private async promote(id: string): Promise<boolean> {
    try {
      const job = await this.d.jobs.getJob(id);
      // Not there yet (a direct first attempt adds its job after the admission), or removed.
      if (!job) return false;
      try {
        await job.promote();
        return true;
      } catch {
        // Not delayed: still running the attempt that will delay it (try again), else waiting,
        // done or gone. Only the active list is searched (as long as the worker's concurrency):
        // the job's full state would search the wait list, as long as the whole backlog once it
        // is released, for every job released.
        return !(await job.isActive());
      }
    } catch (err) {
      this.d.logger.warn({ err, jobId: id }, "could not release a delivery waiting on a circuit");
      return true;
    }
  }

  /** Stops releases in progress (their jobs run at the end of their delays). Idempotent. */
  close(): void {
    this.closed = true;
  }
}
