import type { Redis } from "ioredis";
import { defineScript, type ScriptCall } from "./script.js";
import { TOKEN_BUCKET } from "./scripts/token-bucket.js";

/**
 * A token bucket per key, refilled at `ratePerSecond` up to `burst` tokens, kept in Redis so every
 * API process shares it (store/scripts/token-bucket.ts).
 */
export class RateLimiter {
  private readonly bucket: ScriptCall;

  constructor(
    redis: Redis,
    private readonly ratePerSecond: number,
    private readonly burst: number,
    private readonly now: () => number = Date.now,
  ) {
    this.bucket = defineScript(redis, TOKEN_BUCKET);
  }

  /** Takes `cost` tokens: 0 when the request may go ahead, else the wait in ms (nothing taken). */
  async take(key: string, cost = 1): Promise<number> {
    return Number(await this.bucket([key], [this.ratePerSecond, this.burst, this.now(), cost]));
  }
}
