import type { RedisClient } from "./context.js";
import { defineScript, type ScriptCall } from "./script.js";
import type { Keys } from "./keys.js";
import { TOKEN_BUCKET } from "./scripts/token-bucket.js";
import { WEBHOOK_SLOT } from "./scripts/webhook-slot.js";

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
 * How long a reservation outlives its slot: a delivery that comes back later than this (its job was
 * delayed by a backed-up queue for that long) has lost its turn and takes a new one; one that never
 * comes back (deleted, given up) stops taking space.
 */
const SLOT_KEEP_MS = 3_600_000;

/**
 * A webhook's `rate_limit_per_second`, shared by every worker process, read from its record at each
 * attempt (so a changed limit applies at once). An attempt that cannot start now reserves the
 * webhook's next free start slot and waits for exactly that (store/scripts/webhook-slot.ts): a
 * backlog of N deliveries comes back N times in all, spaced `1000 / rate` ms apart, and no second
 * ever sees more than `rate` starts (plus the one at its edge), whichever worker makes them.
 */
export class WebhookRateLimiter {
  private readonly slot: ScriptCall;

  constructor(
    redis: RedisClient,
    private readonly keys: Pick<Keys, "webhookRate" | "webhookRateSlots">,
  ) {
    this.slot = defineScript(redis, WEBHOOK_SLOT);
  }

  /**
   * Takes a start of `webhookId` at `ratePerSecond` for the attempt `token` (its job id, the same
   * each time the job comes back): 0 when it may start now, else the wait in ms until its slot.
   * A circuit's probe takes no slot: it waits only for the spacing of the starts (at most an interval).
   */
  async take(userId: string, webhookId: string, ratePerSecond: number, token: string, probe = false): Promise<number> {
    return Number(await this.slot(this.keysOf(userId, webhookId), [1000 / ratePerSecond, token, SLOT_KEEP_MS, probe ? "probe" : "take"]));
  }

  /** Gives back the slot reserved for `token`, if any (its attempt was turned away by the webhook's circuit). */
  async drop(userId: string, webhookId: string, token: string): Promise<void> {
    await this.slot(this.keysOf(userId, webhookId), [0, token, 0, "drop"]);
  }

  private keysOf(userId: string, webhookId: string): string[] {
    return [this.keys.webhookRate(userId, webhookId), this.keys.webhookRateSlots(userId, webhookId)];
  }
}
