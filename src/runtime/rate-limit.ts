import type { Redis } from "ioredis";
import { defineScript, type ScriptCall } from "../store/script.js";
import { TOKEN_BUCKET_LUA } from "../store/token-bucket-lua.js";

/**
 * A token bucket per key, refilled at `ratePerSecond` up to `burst` tokens, kept in Redis so every
 * API process shares it (store/token-bucket-lua.ts).
 */
export class RateLimiter {
  private readonly bucket: ScriptCall;

  constructor(
    redis: Redis,
    private readonly ratePerSecond: number,
    private readonly burst: number,
    private readonly now: () => number = Date.now,
  ) {
    this.bucket = defineScript(redis, "tokenBucket", 1, TOKEN_BUCKET_LUA);
  }

  /** Takes `cost` tokens: 0 when the request may go ahead, else the wait in ms (nothing taken). */
  async take(key: string, cost = 1): Promise<number> {
    return Number(await this.bucket([key], [this.ratePerSecond, this.burst, this.now(), cost]));
  }
}
