/**
 * Recovery after an outage: BENCH_RECOVERY_N events (default 100,000) to a webhook whose receiver is
 * down (503), so every delivery waits (its circuit opens, the rest park on it), then the receiver
 * comes back and the backlog drains. Reports the drain rate, daemon and Redis CPU per delivery, the
 * Redis bytes each pending delivery held, and the rate over the first and the last fifth of the
 * drain: a cost per delivery that grows with the backlog shows as a first fifth slower than the last.
 */
import { performance } from "node:perf_hooks";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { type Phase, postSmallEvents } from "../context.js";
import { apiData } from "../daemon-process.js";
import { CircuitStore } from "../../src/store/circuit.js";
import type { Keys } from "../../src/store/keys.js";
import { outboxLength } from "../../src/store/outbox-stream.js";
import type { Cost } from "../meter.js";
import { startReceiver } from "../receiver.js";
import { metricValue, scrape } from "../runtime.js";
import { fmt, sleep } from "../stats.js";

/** The workflow whose events go to the recovering webhook alone. */
const RECOVERY_WORKFLOW = "p_bench_recovery";

export interface RecoveryResult {
  readonly n: number;
  readonly delivered: number;
  readonly complete: boolean;
  /** Deliveries per second from the first to the last arrival. */
  readonly perSec: number;
  /** Rates over the first and the last fifth of the deliveries. */
  readonly firstFifthPerSec: number;
  readonly lastFifthPerSec: number;
  /** Redis used_memory per pending delivery once all were pending, bytes. */
  readonly bytesPerPending: number;
  readonly cost: Cost;
  /** The Redis commands that took the most server time during the drain: name, µs per delivery. */
  readonly redisTime: readonly [string, number][];
}

const envInt = (k: string, d: number) => {
  const v = Number(process.env[k]);
  return Number.isInteger(v) && v > 0 ? v : d;
};

async function usedMemory(redis: Redis): Promise<number> {
  const text = await redis.info("memory");
  return Number(/^used_memory:(\d+)/m.exec(text)?.[1] ?? 0);
}

/** Server time (µs) per command, from INFO commandstats. */
async function commandTime(redis: Redis): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  const text = await redis.info("commandstats");
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=\d+,usec=(\d+)/gm)) out.set(m[1] as string, Number(m[2]));
  return out;
}

/** Delivery attempts not made so far, by why (the daemon's /metrics): circuit open, cap full, rate limit. */
async function turnedAway(url: string): Promise<Record<string, number>> {
  const text = await scrape(url);
  const out: Record<string, number> = {};
  for (const outcome of ["circuit_open", "capped", "rate_limited"])
    out[outcome] = metricValue(text, "tributary_deliveries_total", { outcome });
  return out;
}

/** Rate between the arrivals of the `from`-th and `to`-th deliveries (by arrival order). */
function rateBetween(sorted: readonly number[], from: number, to: number): number {
  const a = sorted[from];
  const b = sorted[to];
  return a !== undefined && b !== undefined && b > a ? ((to - from) * 1000) / (b - a) : Number.NaN;
}

/**
 * Waits until every delivery is parked for the circuit's next probe, at least PROBE_LEAD_MS away:
 * none is due before it, none running. The receiver then comes back before the probe, so the row
 * measures the recovery alone, not the backlog being turned away once more after the outage's
 * last failed probe (each opening's cost, which the short cool-downs here make frequent).
 */
async function untilParkedForProbe(
  redis: Redis,
  keys: Keys,
  q: Queue,
  userId: string,
  hookId: string,
  alive: () => void,
  log: (line: string) => void,
): Promise<void> {
  const circuits = new CircuitStore(redis, keys, { threshold: 1, cooldownMs: 1, maxCooldownMs: 1 });
  const start = performance.now();
  for (;;) {
    alive();
    const { nextProbeAtMs } = await circuits.read(userId, hookId);
    if (nextProbeAtMs !== null && nextProbeAtMs - Date.now() >= PROBE_LEAD_MS) {
      const [dueBefore, c] = await Promise.all([
        redis.zcount(keys.webhookCircuitWaiting(userId, hookId), "-inf", `(${nextProbeAtMs}`),
        q.getJobCounts("wait", "active", "prioritized"),
      ]);
      if (dueBefore === 0 && (c.wait ?? 0) + (c.active ?? 0) + (c.prioritized ?? 0) === 0) return;
    }
    if (performance.now() - start > 120_000)
      return log("  the deliveries did not all settle on the circuit's next probe in 120 s: measuring anyway");
    await sleep(50);
  }
}

/** How long before the circuit's next probe the receiver comes back, at least. */
const PROBE_LEAD_MS = 500;

export const recovery: Phase = {
  name: "recovery",
  needs: ["daemon", "worker"],
  async run(ctx) {
    const { redis, keys, log } = ctx;
    const n = envInt("BENCH_RECOVERY_N", 100_000);
    log(`recovery: ${fmt(n)} deliveries to a receiver that is down, then back`);
    // The circuit's first cool-down short, so the probe after the receiver is back comes soon.
    await ctx.stopDeployment();
    await ctx.deploy({ CIRCUIT_COOLDOWN: "1s" });
    const dm = await ctx.deployment();
    const down = await startReceiver();
    ctx.cleanups.push(() => down.close());
    down.setDown(true);
    const me = await apiData<{ id: string }>(dm.url, ctx.key, "GET", "/v1/users/me", undefined, 200);
    // Retries every 2 s while attempts are made: the probes of the open circuit spend attempts, the
    // deliveries parked on it none, so no delivery runs out of its schedule during the outage.
    const hook = await apiData<{ id: string }>(
      dm.url,
      ctx.key,
      "POST",
      "/v1/webhooks",
      { url: down.url, name: "bench recovery", retry_schedule: Array(20).fill("2s").join(",") },
      200,
    );
    await apiData(dm.url, ctx.key, "POST", "/v1/subscriptions", { emitter_id: RECOVERY_WORKFLOW, listener_id: hook.id }, 200);
    const q = new Queue("delivery", { connection: redis, prefix: keys.queuePrefix("delivery") });
    try {
      const memBefore = await usedMemory(redis);
      await postSmallEvents({ url: dm.url, key: ctx.key }, RECOVERY_WORKFLOW, n);
      // Every delivery pending: fan-out is done and each delivery has its job, waiting on the
      // circuit (delayed; a delivery turned away by the open circuit before any attempt has no
      // record yet).
      const start = performance.now();
      for (;;) {
        dm.ensureAlive();
        const c = await q.getJobCounts("delayed", "wait", "active", "prioritized");
        const jobs = (c.delayed ?? 0) + (c.wait ?? 0) + (c.active ?? 0) + (c.prioritized ?? 0);
        if (jobs >= n && (await outboxLength(redis, keys)) === 0) break;
        if (performance.now() - start > 600_000) throw new Error(`recovery: ${jobs} of ${n} deliveries queued after 600 s`);
        await sleep(500);
      }
      const records = await redis.zcard(keys.deliveries(me.id, hook.id));
      const bytesPerPending = ((await usedMemory(redis)) - memBefore) / n;
      log(
        `  all ${fmt(n)} pending after ${fmt((performance.now() - start) / 1000, 1)} s (${fmt(records)} with an attempt record): ${fmt(bytesPerPending)} B of Redis each`,
      );
      await untilParkedForProbe(redis, keys, q, me.id, hook.id, () => dm.ensureAlive(), log);
      const turnedAwayBefore = await turnedAway(dm.url);
      const timeBefore = await commandTime(redis);
      const meter = await ctx.meter();
      down.setDown(false);
      const complete = await down.waitFor(n, 900_000);
      const delivered = down.count();
      const cost = await meter(delivered);
      const timeAfter = await commandTime(redis);
      const turnedAwayAfter = await turnedAway(dm.url);
      const bounces = Object.entries(turnedAwayAfter)
        .map(([why, k]) => `${why} ${fmt(k - (turnedAwayBefore[why] ?? 0))}`)
        .join(", ");
      const redisTime: [string, number][] = [...timeAfter]
        .map(([cmd, us]): [string, number] => [cmd, (us - (timeBefore.get(cmd) ?? 0)) / Math.max(1, delivered)])
        .filter(([, us]) => us > 0)
        .sort((a, b) => b[1] - a[1])
        .slice(0, 6);
      const w = down.window();
      const arrivals = [...down.arrivals.values()].sort((a, b) => a - b);
      const fifth = Math.floor(arrivals.length / 5);
      const result: RecoveryResult = {
        n,
        delivered,
        complete,
        perSec: w && w.last > w.first ? ((delivered - 1) * 1000) / (w.last - w.first) : Number.NaN,
        firstFifthPerSec: rateBetween(arrivals, 0, fifth),
        lastFifthPerSec: rateBetween(arrivals, arrivals.length - 1 - fifth, arrivals.length - 1),
        bytesPerPending,
        cost,
        redisTime,
      };
      log(
        `  drained ${fmt(delivered)}/${fmt(n)} (attempts put off meanwhile: ${bounces}) at ${fmt(result.perSec)}/s (first fifth ${fmt(result.firstFifthPerSec)}/s, last fifth ${fmt(result.lastFifthPerSec)}/s); ` +
          `CPU per delivery ${Object.entries(cost.usPerUnit)
            .filter(([k]) => k !== "bench")
            .map(([k, v]) => `${k} ${fmt(v)} µs`)
            .join(
              ", ",
            )}; Redis time per delivery ${redisTime.map(([c, us]) => `${c} ${fmt(us, 1)} µs`).join(", ")}; Redis calls per delivery ${cost.redisTop.map(([c, k]) => `${c} ${fmt(k, 1)}`).join(", ")}`,
      );
      return { recovery: result };
    } finally {
      await q.close();
      await ctx.stopDeployment();
    }
  },
};
