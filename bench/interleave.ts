/**
 * Closed-loop load moved between processes in short slices, round after round, the order rotating
 * each round: a shared host whose speed drifts from one minute to the next then slows every arm
 * alike, which one slice per arm cannot promise (the same build's single-emit ratio moved between
 * 0.8× and 1.25× from one `npm run bench` to the next). Used by the bench's `interleaved` phase
 * (row 1's verdict) and by `bench/ab-ingest.ts`.
 */
import { cpuMeter } from "./cpu.js";
import { hammer } from "./load.js";
import { median } from "./stats.js";

/** One process under load: where to send, and whose CPU to count (the process and its children). */
export interface SliceArm {
  readonly name: string;
  readonly pid: number;
  readonly url: string;
  readonly headers: Record<string, string>;
  /** The arm's own Redis server, when it has one: its CPU per request is reported too. */
  readonly redisPid?: number | undefined;
}

/** What each slice of one arm measured, in round order. */
export interface ArmSlices {
  /** Requests per second. */
  readonly rps: number[];
  /** CPU µs per request of the arm's process (and its children). */
  readonly us: number[];
  /** CPU µs per request of its Redis server (0 without one). */
  readonly redisUs: number[];
  /** Requests answered in the slices. */
  requests: number;
}

/** The `interleaved` phase's result: row 1's verdict when present. */
export interface InterleavedIngest {
  readonly rounds: number;
  readonly sliceS: number;
  /** Daemon req/s ÷ baseline req/s, per round. */
  readonly ratios: readonly number[];
  /** Baseline CPU µs ÷ daemon CPU µs per request, per round. */
  readonly cpuRatios: readonly number[];
  readonly daemon: ArmSlices;
  readonly baseline: ArmSlices;
  /** The most CPU other processes (not the arms, their Redis or the load) took during a slice, % of one core. */
  readonly otherPeakPct: number;
  /** The median over slices of the same. */
  readonly otherMedianPct: number;
}

/** Each round's ratio of `a` to `b` (per slice pair), for a median and a range. */
export const roundRatios = (a: readonly number[], b: readonly number[]): number[] => a.map((x, i) => x / (b[i] as number));

/**
 * Runs `rounds` rounds; in each, every arm takes `sliceS` seconds of load at `connections`
 * connections, in an order that rotates by one each round. Throws on a failed request. `onRound`
 * gets a line per round (progress).
 */
export async function interleavedSlices(
  arms: readonly SliceArm[],
  opts: { rounds: number; sliceS: number; connections: number; body: string; onRound?: (line: string) => void },
): Promise<{ slices: ArmSlices[]; otherPeakPct: number; otherMedianPct: number }> {
  const slices: ArmSlices[] = arms.map(() => ({ rps: [], us: [], redisUs: [], requests: 0 }));
  const other: number[] = [];
  for (let r = 0; r < opts.rounds; r++) {
    const line: string[] = [];
    for (let k = 0; k < arms.length; k++) {
      const i = (r + k) % arms.length;
      const a = arms[i] as SliceArm;
      const s = slices[i] as ArmSlices;
      // The load comes from this process: counted on its own, so `other` is what no arm, Redis or load caused.
      const meter = cpuMeter({ arm: a.pid, redis: a.redisPid, bench: process.pid });
      const res = await hammer({ url: a.url, body: opts.body, headers: a.headers, durationS: opts.sliceS, connections: opts.connections });
      const { pct, wallMs } = meter();
      if (res.bad > 0) throw new Error(`${a.name}: ${res.bad} failed requests`);
      const usPerRequest = (share: number | undefined) => (((share ?? 0) / 100) * wallMs * 1000) / Math.max(1, res.ok);
      s.us.push(usPerRequest(pct.arm));
      s.redisUs.push(usPerRequest(pct.redis));
      s.rps.push(res.reqPerSec);
      s.requests += res.ok;
      other.push(pct.other ?? 0);
      line.push(`${a.name} ${Math.round(s.us.at(-1) as number)} µs ${Math.round(res.reqPerSec)}/s`);
    }
    opts.onRound?.(`round ${r + 1}: ${line.join(" · ")}`);
  }
  return { slices, otherPeakPct: Math.max(0, ...other), otherMedianPct: median(other) };
}
