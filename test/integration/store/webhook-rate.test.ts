import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeys } from "../../../src/store/keys.js";
import { WebhookRateLimiter } from "../../../src/store/rate-limit.js";
import { connectRedis, dropPrefix, testPrefix } from "../../helpers/redis.js";

/**
 * A webhook's start slots (store/scripts/webhook-slot.ts) against a real Redis, on Redis's clock:
 * reservations one interval apart, each found again by its token, a probe that does not queue
 * behind them, and slots given back.
 */
const prefix = testPrefix();
const keys = createKeys(prefix);
let redis: Redis;
let limiter: WebhookRateLimiter;

beforeAll(() => {
  redis = connectRedis();
  limiter = new WebhookRateLimiter(redis, keys);
});
afterAll(async () => {
  await dropPrefix(redis, prefix);
  redis.disconnect();
});

/** 1/s: slots a second apart, far above the time these calls take. */
const RATE = 1;

describe("webhook start slots", () => {
  it("hands N waiting attempts N distinct slots a second apart, and each its own again when it comes back early", async () => {
    const waits: number[] = [];
    for (let i = 0; i < 10; i++) waits.push(await limiter.take("u_r", "wh_1", RATE, `job-${i}`));
    expect(waits[0]).toBe(0);
    for (let i = 1; i < 10; i++) {
      expect(waits[i], `job-${i}`).toBeGreaterThan(i * 1000 - 300);
      expect(waits[i], `job-${i}`).toBeLessThanOrEqual(i * 1000);
    }
    // Back before its turn: the same slot, no new one.
    const again = await limiter.take("u_r", "wh_1", RATE, "job-5");
    expect(again).toBeGreaterThan(4000);
    expect(again).toBeLessThanOrEqual(5000);
    // A newcomer goes after the last one.
    expect(await limiter.take("u_r", "wh_1", RATE, "job-new")).toBeGreaterThan(9700);
    // Another webhook has its own schedule.
    expect(await limiter.take("u_r", "wh_2", RATE, "job-0")).toBe(0);
  });

  it("lets a circuit's probe start within an interval, not after the reserved slots, and frees slots given back", async () => {
    for (let i = 0; i < 20; i++) await limiter.take("u_r", "wh_3", RATE, `job-${i}`);
    const probe = await limiter.take("u_r", "wh_3", RATE, "probe", true);
    expect(probe).toBeLessThanOrEqual(1000);
    // The reservations of deliveries turned away by the circuit are given back, the latest ones
    // too: a newcomer is no longer put after them.
    for (let i = 1; i < 20; i++) await limiter.drop("u_r", "wh_3", `job-${i}`);
    expect(await limiter.take("u_r", "wh_3", RATE, "job-new")).toBeLessThanOrEqual(2000);
  });
});
