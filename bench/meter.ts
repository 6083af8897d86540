import type { Redis } from "ioredis";
import { type CpuShares, cpuMeter } from "./cpu.js";

/** What one measured phase cost: CPU per process and Redis commands, also per unit of work. */
export interface Cost {
  /** % of one core per process over the phase, plus `other` (the rest of the machine). */
  readonly pct: CpuShares;
  /** CPU microseconds per unit of work (request, event, delivery), per process. */
  readonly usPerUnit: CpuShares;
  /** Redis commands per unit of work (every client: the daemon's, BullMQ's, the bench's few). */
  readonly redisPerUnit: number;
  /** The busiest Redis commands, per unit. */
  readonly redisTop: [string, number][];
}

/** Calls per command, summed over the given servers (each a connection to one node). */
export async function commandCalls(servers: readonly Redis[]): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const redis of servers) {
    const text = await redis.info("commandstats");
    for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out.set(m[1] as string, (out.get(m[1] as string) ?? 0) + Number(m[2]));
  }
  return out;
}

/**
 * Starts measuring; `stop(units)` returns the cost of the phase, divided by `units` where it says so.
 * `redis`: the server whose commands are counted, or several (a Redis Cluster's nodes: summed).
 */
export async function startMeter(
  pids: Record<string, number | undefined>,
  redis: Redis | readonly Redis[] | undefined,
): Promise<(units: number) => Promise<Cost>> {
  const servers: readonly Redis[] = redis === undefined ? [] : "info" in redis ? [redis] : redis;
  const before = await commandCalls(servers);
  const cpu = cpuMeter(pids);
  return async (units) => {
    const { pct, wallMs } = cpu();
    const after = await commandCalls(servers);
    const delta: [string, number][] = [];
    for (const [cmd, n] of after) {
      const d = n - (before.get(cmd) ?? 0) - (cmd === "info" ? servers.length : 0);
      if (d > 0) delta.push([cmd, d]);
    }
    delta.sort((a, b) => b[1] - a[1]);
    const per = (n: number) => (units > 0 ? n / units : Number.NaN);
    const usPerUnit: CpuShares = {};
    for (const [k, v] of Object.entries(pct)) if (k !== "other") usPerUnit[k] = per((v / 100) * wallMs * 1000);
    return {
      pct,
      usPerUnit,
      redisPerUnit: per(delta.reduce((a, [, n]) => a + n, 0)),
      redisTop: delta.slice(0, 8).map(([c, n]) => [c, per(n)]),
    };
  };
}
