import { ingressBatchTooLarge, ingressRateLimited } from "../domain/limits.js";
import type { IngressCharge } from "../store/events.js";

/** Takes tokens from a shared bucket: 0 when taken, else the wait in ms (runtime/rate-limit.ts). */
export interface TokenBucket {
  take(key: string, cost: number): Promise<number>;
}

/**
 * The per-user ingress rate: workflow emits (every event of a batch counts) and HTTP source
 * requests (one each) take from one token bucket per user, shared by every API process through
 * Redis. Past it, 429 `rate_limited` with Retry-After; a request of more events than the bucket
 * holds can never pass and is a 413.
 */
export class IngressRate {
  constructor(
    private readonly bucket: TokenBucket,
    private readonly keyOf: (userId: string) => string,
    private readonly limits: { readonly perSecond: number; readonly burst: number },
  ) {}

  /** Admits `events` events of the user, or throws 429/413. Free when the rate is unlimited (0). */
  async admit(userId: string, events: number): Promise<void> {
    const { perSecond, burst } = this.limits;
    if (perSecond === 0 || events <= 0) return;
    if (events > burst) throw ingressBatchTooLarge(events, burst);
    const waitMs = await this.bucket.take(this.keyOf(userId), events);
    if (waitMs > 0) throw this.refused(waitMs);
  }

  /**
   * The same admission taken by the record script in its own step (one round trip per emit, see
   * store/scripts/record-events.ts): the charge to pass it, undefined when the rate is unlimited;
   * throws 413 for a batch the bucket can never hold.
   */
  charge(userId: string, events: number): IngressCharge | undefined {
    const { perSecond, burst } = this.limits;
    if (perSecond === 0 || events <= 0) return undefined;
    if (events > burst) throw ingressBatchTooLarge(events, burst);
    return { key: this.keyOf(userId), cost: events, perSecond, burst };
  }

  /** The 429 for tokens the bucket could not pay within `waitMs`. */
  refused(waitMs: number): Error {
    return ingressRateLimited(waitMs, this.limits.perSecond, this.limits.burst);
  }
}
