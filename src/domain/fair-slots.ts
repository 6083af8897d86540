/**
 * Fairness between tenants and destinations (docs/decisions.md "Delivery fairness"), as pure
 * bookkeeping: which delivery attempts may be in flight at once, and who gets a slot when one
 * frees. No timers and no I/O: delivery/fair-gate.ts adds the bounded waits around it.
 *
 * Three limits apply to every attempt, and all must have room for it to start:
 * - its pool's total (fan-out's direct slots, DELIVERY_DIRECT_CONCURRENCY; the queue worker's
 *   pool is bounded by BullMQ's concurrency instead, so its total here is unlimited);
 * - its user's cap, over every pool (DELIVERY_CONCURRENCY_PER_USER);
 * - its destination's cap, over every pool and user (DELIVERY_CONCURRENCY_PER_DESTINATION).
 *
 * Waiters are served round-robin by user, FIFO within a user: when slots free, the next user in
 * the rotation whose oldest startable waiter fits goes first, then moves to the back. A user with
 * hundreds of waiters gets one slot per turn like a user with one.
 */

/** Who an attempt counts against. */
export interface Claim {
  readonly pool: string;
  readonly user: string;
  /** The destination key (destinationKey below). */
  readonly destination: string;
}

export interface SlotLimits {
  /** Attempts in flight per pool; a pool not named is unlimited. */
  readonly pools: Readonly<Record<string, number>>;
  /** Attempts in flight per user, over every pool; 0 = unlimited. */
  readonly perUser: number;
  /** Attempts in flight per destination, over every pool and user; 0 = unlimited. */
  readonly perDestination: number;
}

/** The limit that keeps an attempt from starting. */
export type Blocker = "pool" | "user" | "destination";

/** One attempt in flight; handed back to `finish`. */
export interface Held {
  readonly claim: Claim;
  readonly token: number;
}

interface Waiter<W> {
  readonly claim: Claim;
  readonly value: W;
}

/** Counts, and the start times of what is in flight, per key (a Map keeps insertion order: first = oldest). */
class Tally {
  private readonly byKey = new Map<string, Map<number, number>>();

  count(key: string): number {
    return this.byKey.get(key)?.size ?? 0;
  }

  oldest(key: string): number | undefined {
    return this.byKey.get(key)?.values().next().value;
  }

  add(key: string, token: number, atMs: number): void {
    const started = this.byKey.get(key);
    if (started) started.set(token, atMs);
    else this.byKey.set(key, new Map([[token, atMs]]));
  }

  remove(key: string, token: number): void {
    const started = this.byKey.get(key);
    if (!started) return;
    started.delete(token);
    if (started.size === 0) this.byKey.delete(key);
  }

  get keys(): number {
    return this.byKey.size;
  }
}

export class FairSlots<W> {
  private readonly pools = new Tally();
  private readonly users = new Tally();
  private readonly destinations = new Tally();
  /** Waiters per user; the Map's order is the rotation (a served user moves to the back). */
  private readonly waiting = new Map<string, Waiter<W>[]>();
  private nextToken = 0;

  constructor(private readonly limits: SlotLimits) {}

  /** The first limit (pool, user, destination) without room for `claim`, or undefined when it may start. */
  blocker(claim: Claim): Blocker | undefined {
    const pool = this.limits.pools[claim.pool];
    if (pool !== undefined && this.pools.count(claim.pool) >= pool) return "pool";
    if (this.limits.perUser > 0 && this.users.count(claim.user) >= this.limits.perUser) return "user";
    if (this.limits.perDestination > 0 && this.destinations.count(claim.destination) >= this.limits.perDestination) return "destination";
    return undefined;
  }

  /**
   * Starts `claim` if every limit has room and no waiter of its user is ahead of it (a user's
   * attempts start in order); undefined otherwise.
   */
  tryStart(claim: Claim, nowMs: number): Held | undefined {
    if (this.blocker(claim) !== undefined || this.waiting.has(claim.user)) return undefined;
    return this.start(claim, nowMs);
  }

  /**
   * When the oldest attempt in flight under `blocker`'s key for `claim` started (undefined when
   * none is in flight): how long the slots it waits for have been held.
   */
  oldestStart(claim: Claim, blocker: Blocker): number | undefined {
    if (blocker === "pool") return this.pools.oldest(claim.pool);
    if (blocker === "user") return this.users.oldest(claim.user);
    return this.destinations.oldest(claim.destination);
  }

  /** Queues a waiter behind its user's earlier ones. */
  wait(claim: Claim, value: W): void {
    const list = this.waiting.get(claim.user);
    if (list) list.push({ claim, value });
    else this.waiting.set(claim.user, [{ claim, value }]);
  }

  /** Removes a waiter (its wait ran out); false when it was not waiting (it was granted meanwhile). */
  cancel(claim: Claim, value: W): boolean {
    const list = this.waiting.get(claim.user);
    const at = list ? list.findIndex((x) => x.value === value) : -1;
    if (!list || at < 0) return false;
    list.splice(at, 1);
    if (list.length === 0) this.waiting.delete(claim.user);
    return true;
  }

  /** Ends an attempt. Call `grant` next: its slot may go to a waiter. */
  finish(held: Held): void {
    const { claim, token } = held;
    this.pools.remove(claim.pool, token);
    this.users.remove(claim.user, token);
    this.destinations.remove(claim.destination, token);
  }

  /**
   * Starts every waiter that fits now, round-robin by user: each turn takes the first user in the
   * rotation with a waiter that fits (its earliest such waiter; a later one may pass one blocked
   * by its destination), starts it and moves that user to the back. Returns the waiters started.
   */
  grant(nowMs: number): { value: W; held: Held }[] {
    const out: { value: W; held: Held }[] = [];
    for (;;) {
      let turn: { user: string; list: Waiter<W>[]; at: number } | undefined;
      for (const [user, list] of this.waiting) {
        const at = list.findIndex((x) => this.blocker(x.claim) === undefined);
        if (at >= 0) {
          turn = { user, list, at };
          break;
        }
      }
      if (!turn) return out;
      const [waiter] = turn.list.splice(turn.at, 1) as [Waiter<W>];
      this.waiting.delete(turn.user);
      if (turn.list.length > 0) this.waiting.set(turn.user, turn.list);
      out.push({ value: waiter.value, held: this.start(waiter.claim, nowMs) });
    }
  }

  /** Attempts in flight in `pool`. */
  inFlight(pool: string): number {
    return this.pools.count(pool);
  }

  /** Waiters, all users together. */
  get waiters(): number {
    let n = 0;
    for (const list of this.waiting.values()) n += list.length;
    return n;
  }

  /** Keys with attempts in flight (users + destinations): all zero once everything finished. */
  get tracked(): number {
    return this.pools.keys + this.users.keys + this.destinations.keys;
  }

  private start(claim: Claim, nowMs: number): Held {
    const token = this.nextToken++;
    this.pools.add(claim.pool, token, nowMs);
    this.users.add(claim.user, token, nowMs);
    this.destinations.add(claim.destination, token, nowMs);
    return { claim, token };
  }
}

/**
 * How long a waiter may wait for a slot, given when the oldest attempt holding the slots it waits
 * for started: until that attempt would count as slow (`clogMs`), and not at all once it does
 * (the rule of delivery/direct.ts, now per limit). Slots held by quick attempts free up in
 * moments; slots held by a slow destination would hold the waiter's own slot (a fan-out loop, a
 * queue worker's job) hostage, so the delivery is put off at once.
 */
export function slotWaitMs(oldestStartMs: number | undefined, nowMs: number, clogMs: number): number {
  if (oldestStartMs === undefined) return clogMs;
  return Math.max(0, clogMs - Math.max(0, nowMs - oldestStartMs));
}

/**
 * The destination an attempt counts against: the URL's origin (scheme, host and port, lower-case),
 * so every webhook and workflow on one host shares its cap (a dead host is one destination,
 * however many webhooks point at it). A URL that does not parse counts on its own listener.
 */
export function destinationKey(url: string | null | undefined, listenerId: string): string {
  if (url) {
    try {
      return new URL(url).origin;
    } catch {
      // falls through
    }
  }
  return `listener:${listenerId}`;
}

/**
 * The delay before a delivery put off by a cap is tried again: 250 ms doubling with each put-off
 * of the same job, up to 8 s, spread over ±50 % so put-off jobs do not come back together. A
 * destination that stays saturated then costs each of its waiting jobs one queue round every
 * ~8 s, not a busy loop; one that frees up takes them back within seconds.
 */
export function putOffDelayMs(putOffs: number, random: () => number): number {
  const base = Math.min(8000, 250 * 2 ** Math.max(0, Math.min(putOffs, 10)));
  return Math.round(base * (0.5 + random()));
}
