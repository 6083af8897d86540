import { type Blocker, type Claim, destinationKey, FairSlots, type Held, slotWaitMs } from "../domain/fair-slots.js";
import type { Metrics } from "../observability/metrics.js";
import type { DeliveryJob } from "../queue/catalog.js";

/** The pools attempts are made from: fan-out's direct first attempts, and the queue worker's jobs. */
export type AttemptPool = "direct" | "queue";

export interface FairGateDeps {
  /** DELIVERY_DIRECT_CONCURRENCY: the direct pool's slots (the queue's are BullMQ's concurrency). */
  directSlots: number;
  /** DELIVERY_CONCURRENCY_PER_USER (0 = unlimited). */
  perUser: number;
  /** DELIVERY_CONCURRENCY_PER_DESTINATION (0 = unlimited). */
  perDestination: number;
  /**
   * An attempt in flight this long makes the slots it holds count as held by a slow destination:
   * a delivery waiting for one of them is put off at once instead of waiting (fair-slots.ts slotWaitMs).
   */
  clogMs: number;
  /**
   * Where the job's attempt goes (domain/fair-slots.ts destinationKey), from the listener cache.
   * Remembered per listener for `destinationTtlMs`, so fan-out's loop never waits on it for a
   * listener it has seen: past the TTL the remembered one is used while it is read again.
   */
  destinationOf: (job: DeliveryJob) => Promise<string> | string;
  destinationTtlMs?: number;
  metrics: Pick<Metrics, "deliveries">;
  now?: () => number;
}

/** A slot to make one attempt in; `release` it once the attempt settled (idempotent). */
export interface Ticket {
  release(): void;
}

/** A slot, or the limit that left none within the wait. */
export type Entry = { readonly ticket: Ticket } | { readonly blockedBy: Blocker };

type Grant = (held: Held) => void;

/** Listeners whose destination is remembered, at most (then the memory starts over). */
const MAX_REMEMBERED = 10_000;

/**
 * The per-process gate every delivery attempt passes (docs/decisions.md "Delivery fairness"):
 * fan-out's direct attempts and the queue worker's jobs count against the same per-user and
 * per-destination caps (domain/fair-slots.ts). A delivery finding no room waits in memory only
 * while the slots it waits for are held by quick attempts (`clogMs`), and on the direct path only
 * for a direct slot; waiters are served round-robin by user. Otherwise `enter` answers which
 * limit blocked it: fan-out then queues the delivery, and the queue worker puts it off as a
 * delayed job, which spends none of its retry budget (delivery/worker.ts).
 */
export class FairGate {
  private readonly slots: FairSlots<Grant>;
  private readonly now: () => number;
  private readonly uncapped: boolean;
  /**
   * The caps fan-out may wait for, under the clog rule, besides a direct slot: those at or above
   * the direct pool's size. Direct attempts alone fill the pool before such a cap, so when it
   * blocks, the queue's attempts hold its slots, and waiting for one is waiting for the pool (see
   * `enter`).
   */
  private readonly fanoutWaitsFor: ReadonlySet<Blocker>;
  /** "<user> <listener>" → its destination and when it was read. */
  private readonly destinations = new Map<string, { readonly key: string; readonly atMs: number }>();
  private readonly refreshing = new Set<string>();

  constructor(private readonly d: FairGateDeps) {
    this.slots = new FairSlots({ pools: { direct: d.directSlots }, perUser: d.perUser, perDestination: d.perDestination });
    this.now = d.now ?? Date.now;
    this.uncapped = d.perUser === 0 && d.perDestination === 0;
    const waits = new Set<Blocker>(["pool"]);
    if (d.perUser >= d.directSlots) waits.add("user");
    if (d.perDestination >= d.directSlots) waits.add("destination");
    this.fanoutWaitsFor = waits;
  }

  async enter(job: DeliveryJob, pool: AttemptPool): Promise<Entry> {
    // Without caps the destination is never compared: the listener lookup is skipped.
    const destination = this.uncapped ? "" : await this.destinationOf(job);
    const claim: Claim = { pool, user: job.userId, destination };
    const nowMs = this.now();
    const held = this.slots.tryStart(claim, nowMs);
    if (held) return { ticket: this.ticketOf(held) };
    // Undefined: there is room, but earlier waiters of the user come first (handOut below serves
    // this one at once if they cannot use it).
    const blocker = this.slots.blocker(claim);
    // Fan-out waits for a direct slot (as before the caps), and for a user's or a destination's
    // only where that cap is at least the direct pool: direct attempts alone would fill the pool
    // first, so the slots it waits for are held by queued attempts, and waiting is what it does for
    // a full pool. Without that, one overflow would feed itself: queued jobs take the cap's slots,
    // fan-out queues what they block, and a drain to one destination runs through the queue (14 %
    // direct instead of 99 %). A cap below the pool is a fairness setting: waiting for it would
    // hold every other event of the batch behind one user or host, so those deliveries are queued
    // and the worker, whose jobs wait side by side, may wait for them.
    const mayWait = pool === "queue" || blocker === undefined || this.fanoutWaitsFor.has(blocker);
    const waitMs = mayWait ? slotWaitMs(blocker && this.slots.oldestStart(claim, blocker), nowMs, this.d.clogMs) : 0;
    if (waitMs > 0) {
      const granted = await this.waitFor(claim, waitMs);
      if (granted) return { ticket: this.ticketOf(granted) };
    }
    // Counted where it is put off: by the queue worker (fan-out queues what finds no direct room).
    if (pool === "queue") this.d.metrics.deliveries.inc({ listener_kind: job.listenerKind, outcome: "capped" });
    return { blockedBy: blocker ?? "user" };
  }

  /**
   * The job's destination: remembered (read again in the background once older than the TTL), or
   * read now the first time. A failed read counts the attempt on its listener alone: the attempt
   * itself will meet the same failure and report it.
   */
  private destinationOf(job: DeliveryJob): string | Promise<string> {
    const id = `${job.userId} ${job.listenerId}`;
    const known = this.destinations.get(id);
    if (!known) return this.readDestination(job, id);
    if (this.now() - known.atMs > (this.d.destinationTtlMs ?? 10_000) && !this.refreshing.has(id)) {
      this.refreshing.add(id);
      void this.readDestination(job, id).finally(() => this.refreshing.delete(id));
    }
    return known.key;
  }

  private async readDestination(job: DeliveryJob, id: string): Promise<string> {
    try {
      const key = await this.d.destinationOf(job);
      if (this.destinations.size >= MAX_REMEMBERED) this.destinations.clear();
      this.destinations.set(id, { key, atMs: this.now() });
      return key;
    } catch {
      return destinationKey(undefined, job.listenerId);
    }
  }

  /** Attempts in flight in `pool` (tests, diagnostics). */
  inFlight(pool: AttemptPool): number {
    return this.slots.inFlight(pool);
  }

  private waitFor(claim: Claim, waitMs: number): Promise<Held | undefined> {
    return new Promise((resolve) => {
      const grant: Grant = (held) => {
        clearTimeout(timer);
        resolve(held);
      };
      const timer = setTimeout(() => {
        if (this.slots.cancel(claim, grant)) resolve(undefined);
      }, waitMs);
      this.slots.wait(claim, grant);
      // The slot may have freed between the check and the wait (an earlier waiter of the user ahead).
      this.handOut();
    });
  }

  private ticketOf(held: Held): Ticket {
    let done = false;
    return {
      release: () => {
        if (done) return;
        done = true;
        this.slots.finish(held);
        this.handOut();
      },
    };
  }

  private handOut(): void {
    for (const { value: grant, held } of this.slots.grant(this.now())) grant(held);
  }
}
