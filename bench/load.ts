import { performance } from "node:perf_hooks";
import autocannon from "autocannon";
import { Pool } from "undici";
import { summarize } from "./stats.js";

/** A small event as a workflow would emit it; `seq` lets the receiver match deliveries. */
export const smallEvent = (seq: number) => ({ seq, kind: "bench", msg: "hello from the bench", n: 42, ok: true });

export interface ClosedLoopResult {
  readonly reqPerSec: number;
  readonly p50: number;
  readonly p99: number;
  readonly ok: number;
  readonly bad: number;
  readonly durationS: number;
}

/** autocannon for `durationS` seconds; counts only 2xx answers as done work. */
export async function hammer(opts: {
  url: string;
  body: string;
  headers?: Record<string, string>;
  durationS: number;
  connections: number;
}): Promise<ClosedLoopResult> {
  const r = await autocannon({
    url: opts.url,
    method: "POST",
    headers: { "content-type": "application/json", ...opts.headers },
    body: opts.body,
    connections: opts.connections,
    duration: opts.durationS,
    timeout: 10,
  });
  const durationS = r.duration > 0 ? r.duration : opts.durationS;
  return {
    reqPerSec: r["2xx"] / durationS,
    p50: r.latency.p50,
    p99: r.latency.p99,
    ok: r["2xx"],
    bad: r.non2xx + r.errors + r.timeouts,
    durationS,
  };
}

export interface StatusLoopResult extends ClosedLoopResult {
  /** Answers per HTTP status (0 = error or time-out). */
  readonly statuses: Record<string, number>;
}

/**
 * Like `hammer`, but only answers with status `expect` count as done work, and p50/p99 are theirs
 * alone (autocannon's own histogram mixes every answer, e.g. fast 429s).
 */
export async function hammerStatus(opts: {
  url: string;
  body: string;
  headers?: Record<string, string>;
  durationS: number;
  connections: number;
  expect: number;
}): Promise<StatusLoopResult> {
  const ms: number[] = [];
  const statuses: Record<string, number> = {};
  const instance = autocannon({
    url: opts.url,
    method: "POST",
    headers: { "content-type": "application/json", ...opts.headers },
    body: opts.body,
    connections: opts.connections,
    duration: opts.durationS,
    timeout: 10,
  });
  instance.on("response", (_client, status, _bytes, responseTimeMs) => {
    statuses[status] = (statuses[status] ?? 0) + 1;
    if (status === opts.expect) ms.push(responseTimeMs);
  });
  const r = await instance;
  const failed = r.errors + r.timeouts;
  if (failed > 0) statuses[0] = failed;
  const durationS = r.duration > 0 ? r.duration : opts.durationS;
  const s = summarize(ms);
  const total = Object.values(statuses).reduce((a, b) => a + b, 0);
  return { reqPerSec: ms.length / durationS, p50: s.p50, p99: s.p99, ok: ms.length, bad: total - ms.length, durationS, statuses };
}

export interface OpenLoopResult {
  /** seq -> performance.now() when its request was handed to the socket pool. */
  readonly sentAt: Map<number, number>;
  /** Time from send to the 202 of each request, ms. */
  readonly ackMs: number[];
  readonly failures: number;
  readonly requests: number;
  /** How far behind schedule the pacer fell at worst, ms (should stay ~1). */
  readonly maxLagMs: number;
}

/**
 * Open-loop pacing: every millisecond tick sends whatever the schedule says is due
 * (`rate` events/s, `batch` events per request), regardless of how fast answers come back.
 */
export async function openLoop(opts: {
  origin: string;
  path: string;
  token: string;
  rate: number;
  durationMs: number;
  batch: number;
  seqBase: number;
}): Promise<OpenLoopResult> {
  const pool = new Pool(opts.origin, { connections: 64, keepAliveTimeout: 30_000 });
  const total = Math.floor((opts.rate * opts.durationMs) / 1000 / opts.batch) * opts.batch;
  const sentAt = new Map<number, number>();
  const ackMs: number[] = [];
  const inflight = new Set<Promise<void>>();
  let failures = 0;
  let requests = 0;
  let issued = 0;
  let maxLagMs = 0;
  const headers = { authorization: `Bearer ${opts.token}`, "content-type": "application/json" };

  const send = (seqs: number[]) => {
    const body = opts.batch === 1 ? { event: smallEvent(seqs[0] as number) } : { events: seqs.map((s) => ({ event: smallEvent(s) })) };
    const t0 = performance.now();
    for (const s of seqs) sentAt.set(s, t0);
    requests++;
    const p = pool
      .request({ path: opts.path, method: "POST", headers, body: JSON.stringify(body) })
      .then(async (res) => {
        await res.body.dump();
        if (res.statusCode === 202) ackMs.push(performance.now() - t0);
        else failures++;
      })
      .catch(() => {
        failures++;
      });
    inflight.add(p);
    void p.finally(() => inflight.delete(p));
  };

  const start = performance.now();
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const now = performance.now();
      const due = Math.min(total, Math.floor(((now - start) * opts.rate) / 1000));
      if (due - issued >= opts.batch) maxLagMs = Math.max(maxLagMs, ((due - issued - opts.batch) * 1000) / opts.rate);
      while (issued + opts.batch <= due) {
        const seqs: number[] = [];
        for (let k = 0; k < opts.batch; k++) seqs.push(opts.seqBase + issued + k);
        issued += opts.batch;
        send(seqs);
      }
      if (issued >= total) {
        clearInterval(timer);
        resolve();
      }
    }, 1);
  });
  await Promise.all([...inflight]);
  await pool.close();
  return { sentAt, ackMs, failures, requests, maxLagMs };
}
