import type { Redis } from "ioredis";
import type { Logger } from "../observability/logger.js";
import { circuitChangeMessage } from "./circuit.js";
import { InvalidationFeed } from "./invalidation-feed.js";

/**
 * Which webhooks this process knows to have a clean circuit (closed, no failures), so that their
 * attempts skip the circuit in Redis: no admission before sending, no record after a success.
 * A failure is always recorded, and the first failure of a clean circuit publishes its webhook on
 * `keys.circuitChanges()` (store/scripts/circuit-record.ts) in the same step; every process then
 * forgets the hint, and goes to Redis again. As for the listener cache, a process learns of
 * another's change one pub/sub message later (about a millisecond), and hints are used only while
 * the subscription is live.
 *
 * The race with the message: a hint is set from a reply only when no message arrived since the
 * command was sent (a generation count, as in invalidated-cache.ts), so a stale "clean" read
 * cannot outlive the message that made it stale.
 */
export class CircuitHints {
  private readonly clean = new Map<string, number>();
  private generation = 0;
  private readonly feed: InvalidationFeed;

  constructor(
    opts: { readonly subscriber: Redis; readonly channel: string; readonly logger: Logger },
    private readonly maxEntries = 10_000,
    /** A hint older than this is checked in Redis again: a safety net, as the listener cache's. */
    private readonly maxAgeMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {
    this.feed = new InvalidationFeed({
      ...opts,
      what: "circuit hints",
      onMessage: (message) => this.forget(message),
      onDown: () => this.forgetAll(),
    });
  }

  start(): Promise<void> {
    return this.feed.start();
  }

  /** True when the webhook's circuit is known clean. */
  isClean(userId: string, webhookId: string): boolean {
    if (!this.feed.isLive()) return false;
    const at = this.clean.get(circuitChangeMessage(userId, webhookId));
    return at !== undefined && this.now() - at < this.maxAgeMs;
  }

  /** Taken before a command whose reply may say "clean": pass it to `markClean`. */
  version(): number {
    return this.generation;
  }

  /** Records a clean circuit read by a command sent at `version`, unless a change came since. */
  markClean(userId: string, webhookId: string, version: number): void {
    if (version !== this.generation || !this.feed.isLive()) return;
    const key = circuitChangeMessage(userId, webhookId);
    this.clean.delete(key);
    if (this.clean.size >= this.maxEntries) {
      const oldest = this.clean.keys().next();
      if (!oldest.done) this.clean.delete(oldest.value);
    }
    this.clean.set(key, this.now());
  }

  /** Forgets one webhook's hint (its message, or this process's own failure). */
  forget(message: string): void {
    this.generation++;
    this.clean.delete(message);
  }

  private forgetAll(): void {
    this.generation++;
    this.clean.clear();
  }

  /** Stops using hints and closes the subscriber connection. */
  stop(): Promise<void> {
    return this.feed.stop();
  }
}
