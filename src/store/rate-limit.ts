import type { RedisClient } from "./context.js";
import type { IngressCharge } from "./events.js";
import { defineScript, type ScriptCall } from "./script.js";
import { SOURCE_REQUEST_RATE } from "./scripts/source-request-rate.js";
import { TOKEN_BUCKET } from "./scripts/token-bucket.js";

/**
 * A token bucket per key, refilled at `ratePerSecond` up to `burst` tokens, kept in Redis so every
 * API process shares it (store/scripts/token-bucket.ts).
 */
export class RateLimiter {
  private readonly bucket: ScriptCall;
  private readonly withCharge: ScriptCall;

  constructor(
    redis: RedisClient,
    private readonly ratePerSecond: number,
    private readonly burst: number,
    private readonly now: () => number = Date.now,
  ) {
    this.bucket = defineScript(redis, TOKEN_BUCKET);
    this.withCharge = defineScript(redis, SOURCE_REQUEST_RATE);
  }

  /** The bucket in `key` as a step that takes its token inside another script sees it (store/run-stream.ts `RequestGate`). */
  gate(key: string): { key: string; perSecond: number; burst: number } {
    return { key, perSecond: this.ratePerSecond, burst: this.burst };
  }

  /** Takes `cost` tokens: 0 when the request may go ahead, else the wait in ms (nothing taken). */
  async take(key: string, cost = 1): Promise<number> {
    return Number(await this.bucket([key], [this.ratePerSecond, this.burst, this.now(), cost]));
  }

  /**
   * Takes one token from `key`, then, once that one paid, `charge` from its bucket (another rate:
   * a user's ingress), in one step (store/scripts/source-request-rate.ts); returns each one's wait
   * in ms (0: taken). Without a charge, the same as `take(key)`.
   */
  async takeThen(key: string, charge: IngressCharge | undefined): Promise<{ wait: number; chargeWait: number }> {
    const args = charge ? [charge.perSecond, charge.burst, charge.cost] : ["", 0, 0];
    const [wait, chargeWait] = (await this.withCharge(
      [key, charge?.key ?? key],
      [this.ratePerSecond, this.burst, this.now(), ...args],
    )) as [number, number];
    return { wait: Number(wait), chargeWait: Number(chargeWait) };
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
