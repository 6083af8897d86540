import { setTimeout as sleep } from "node:timers/promises";
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
    const started = Date.now();
    for (let i = 0; i < 10; i++) waits.push(await limiter.take("u_r", "wh_1", RATE, `job-${i}`));
    // Each wait is counted from its own call: the calls' spread (long on a busy host) comes off it.
    const spreadMs = Date.now() - started;
    expect(waits[0]).toBe(0);
    for (let i = 1; i < 10; i++) {
      expect(waits[i], `job-${i}`).toBeGreaterThanOrEqual(i * 1000 - spreadMs - 1);
      expect(waits[i], `job-${i}`).toBeLessThanOrEqual(i * 1000);
    }
    // Back before its turn: the same slot, no new one.
    const again = await limiter.take("u_r", "wh_1", RATE, "job-5");
    expect(again).toBeGreaterThanOrEqual(5000 - (Date.now() - started) - 1);
    expect(again).toBeLessThanOrEqual(5000);
    // A newcomer goes after the last one.
    expect(await limiter.take("u_r", "wh_1", RATE, "job-new")).toBeGreaterThanOrEqual(10_000 - (Date.now() - started) - 1);
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

  it("starts one of a pile of reserved attempts that all come back late at once; the others take new slots one interval apart", async () => {
    const rate = 10;
    const tokens = Array.from({ length: 10 }, (_, i) => `late-${i}`);
    for (const t of tokens) await limiter.take("u_r", "wh_4", rate, t);
    // Every slot (the last one 0.9 s ahead) has passed: a backed-up queue hands them all back now.
    await sleep(1500);
    const backAt = Date.now();
    const waits = await Promise.all(tokens.map((t) => limiter.take("u_r", "wh_4", rate, t)));
    // Each wait is counted from its own call: the calls' spread (long on a busy host) comes off a gap.
    const spreadMs = Date.now() - backAt;
    expect(waits.filter((w) => w === 0)).toHaveLength(1);
    const later = waits.filter((w) => w > 0).sort((x, y) => x - y);
    expect(later).toHaveLength(9);
    for (let i = 1; i < later.length; i++)
      expect((later[i] as number) - (later[i - 1] as number), `slot ${i}`).toBeGreaterThanOrEqual(99 - spreadMs);
  });

  it("starts reserved attempts that all come back equally late, each at its own late turn", async () => {
    const tokens = ["even-0", "even-1", "even-2", "even-3"];
    const waits: number[] = [];
    for (const t of tokens) waits.push(await limiter.take("u_r", "wh_5", RATE, t));
    const t0 = Date.now();
    // Each one 0.3 s after its slot (a queue running that much behind): within the tolerance of
    // the one before, so all start, none loses its turn.
    for (const [i, t] of tokens.entries()) {
      if (i === 0) continue;
      const due = t0 + (waits[i] as number) + 300;
      await sleep(Math.max(0, due - Date.now()));
      expect(await limiter.take("u_r", "wh_5", RATE, t), t).toBe(0);
    }
  });
});
