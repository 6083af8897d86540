import { Pool } from "undici";
import { openLoop } from "./load.js";
import { type Summary, summarize } from "./stats.js";

/**
 * The live tail under load (SPEC §9): `streams` SSE clients on one workflow while single emits come
 * in open loop at `rate` events/s. Latency per frame = its arrival at the client − the event's
 * record time (the stream id's milliseconds, Redis's clock; the same host's clock as ours).
 */
export interface LiveTailResult {
  readonly streams: number;
  readonly rate: number;
  readonly emitted: number;
  /** Frames that reached the clients (ideally emitted × streams). */
  readonly frames: number;
  readonly framesPerSec: number;
  readonly latency: Summary;
  readonly failures: number;
}

/** One SSE client: counts frames and records each one's delay since its event was recorded. */
async function openStream(pool: Pool, path: string, key: string, onFrame: (recordedMs: number) => void): Promise<() => void> {
  const ac = new AbortController();
  const res = await pool.request({ path, method: "GET", headers: { authorization: `Bearer ${key}` }, signal: ac.signal });
  if (res.statusCode !== 200) throw new Error(`live tail: ${path} answered ${res.statusCode}`);
  let buf = "";
  res.body.setEncoding("utf8");
  res.body.on("data", (chunk: string) => {
    buf += chunk;
    let end = buf.indexOf("\n\n");
    while (end !== -1) {
      const frame = buf.slice(0, end);
      buf = buf.slice(end + 2);
      if (frame.startsWith("id: ")) onFrame(Number(frame.slice(4, frame.indexOf("-"))));
      end = buf.indexOf("\n\n");
    }
  });
  res.body.on("error", () => {});
  return () => ac.abort();
}

export async function liveTailPhase(opts: {
  url: string;
  key: string;
  workflowId: string;
  streams: number;
  rate: number;
  durationS: number;
  /** Emits one event (the workflow must exist before its streams open). */
  emitOne: () => Promise<void>;
}): Promise<LiveTailResult> {
  await opts.emitOne();
  const pool = new Pool(opts.url, { connections: opts.streams + 4 });
  const delays: number[] = [];
  let frames = 0;
  const closers: (() => void)[] = [];
  try {
    for (let i = 0; i < opts.streams; i++) {
      closers.push(
        await openStream(pool, `/v1/workflows/${opts.workflowId}/sse`, opts.key, (recordedMs) => {
          frames++;
          delays.push(Date.now() - recordedMs);
        }),
      );
    }
    const started = performance.now();
    const r = await openLoop({
      origin: opts.url,
      path: `/v1/workflows/${opts.workflowId}/events`,
      token: opts.key,
      rate: opts.rate,
      durationMs: opts.durationS * 1000,
      batch: 1,
      seqBase: 0,
    });
    const emitted = r.ackMs.length;
    const expected = emitted * opts.streams;
    const deadline = Date.now() + 10_000;
    while (frames < expected && Date.now() < deadline) await new Promise((res) => setTimeout(res, 50));
    const wallS = (performance.now() - started) / 1000;
    return {
      streams: opts.streams,
      rate: opts.rate,
      emitted,
      frames,
      framesPerSec: frames / wallS,
      latency: summarize(delays),
      failures: r.failures,
    };
  } finally {
    for (const c of closers) c();
    await pool.destroy();
  }
}
