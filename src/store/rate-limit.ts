import type { RedisClient } from "./context.js";
import { defineScript, type ScriptCall } from "./script.js";
import { TOKEN_BUCKET } from "./scripts/token-bucket.js";

/**
 * A token bucket per key, refilled at `ratePerSecond` up to `burst` tokens, kept in Redis so every
 * API process shares it (store/scripts/token-bucket.ts).
 */
export class RateLimiter {
  private readonly bucket: ScriptCall;

  constructor(
    redis: RedisClient,
    private readonly ratePerSecond: number,
    private readonly burst: number,
    private readonly now: () => number = Date.now,
  ) {
    this.bucket = defineScript(redis, TOKEN_BUCKET);
  }

  /** The bucket in `key` as a step that takes its token inside another script sees it (store/request-gate.ts `RequestGate`). */
  gate(key: string): { key: string; perSecond: number; burst: number } {
    return { key, perSecond: this.ratePerSecond, burst: this.burst };
  }

  /** Takes `cost` tokens: 0 when the request may go ahead, else the wait in ms (nothing taken). */
  async take(key: string, cost = 1): Promise<number> {
    return Number(await this.bucket([key], [this.ratePerSecond, this.burst, this.now(), cost]));
  }
}

/**
 * A token bucket per key whose rate each call gives: a webhook's `rate_limit_per_second`, read from
 * its record at each attempt, so a changed limit applies at once. The bucket holds one token: the
 * attempts of a webhook start evenly spaced, `1000 / rate` ms apart, so no second ever sees more
 * than `rate` of them start (plus the one at its edge), whichever worker process makes them.
 */
export class KeyedRateLimiter {
  private readonly bucket: ScriptCall;

  constructor(
    redis: RedisClient,
    private readonly now: () => number = Date.now,
  ) {
    this.bucket = defineScript(redis, TOKEN_BUCKET);
  }

  /** Takes a token from `key` at `ratePerSecond`: 0 when the attempt may start, else the wait in ms. */
  async take(key: string, ratePerSecond: number): Promise<number> {
    return Number(await this.bucket([key], [ratePerSecond, 1, this.now(), 1]));
  }
}
