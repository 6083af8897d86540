import { type ConnectionOptions, type Job, Worker } from "bullmq";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import { QUEUES, sourceRunJob, timerJob } from "../queue/catalog.js";
import { WORKER_RECOVERY } from "../queue/worker-options.js";
import { parseBody } from "./http-request.js";
import type { RunBacklog } from "../store/run-backlog.js";
import type { SourceRunner } from "./runner.js";

function parsePayload(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * The worker side of the runtime: source runs queued by HTTP endpoints and fan-out, and timer
 * ticks produced by the job schedulers. A run's failure is recorded on $errors by the runner, so
 * jobs only fail for infrastructure errors (Redis down), which BullMQ then keeps for inspection.
 */
export class RuntimeWorkers {
  private readonly runs: Worker;
  private readonly ticks: Worker;

  constructor(d: {
    connection: ConnectionOptions;
    prefix: string;
    concurrency: number;
    runner: SourceRunner;
    /** Counts each user's queued runs, whose priorities interleave users (store/run-backlog.ts). */
    backlog: RunBacklog;
    logger: Logger;
    metrics: Metrics;
    now: () => number;
  }) {
    this.runs = new Worker(
      QUEUES.sourceRun,
      async (job: Job) => {
        const data = sourceRunJob.parse(job.data);
        await runJob(data);
        // The job ends (completes) after this: the run leaves its user's backlog. A worker killed
        // before here redoes the run (the job stalls) and counts it out then.
        await d.backlog.done(data.userId).catch((err) => d.logger.warn({ err }, "run backlog count failed"));
      },
      { connection: d.connection, prefix: d.prefix, concurrency: d.concurrency, autorun: false, ...WORKER_RECOVERY },
    );
    const runJob = async (data: ReturnType<typeof sourceRunJob.parse>): Promise<void> => {
      if (data.kind === "http") {
        const r = data.request;
        const event = { ...r, body: parseBody(r.bodyRaw, r.headers["content-type"] ?? "") };
        await d.runner.run({ userId: data.userId, sourceId: data.sourceId, trigger: "http", event });
      } else if (data.kind === "event") {
        await d.runner.run({
          userId: data.userId,
          sourceId: data.sourceId,
          trigger: "event",
          event: parsePayload(data.payload),
          hops: data.hops,
        });
      } else {
        await d.runner.run({
          userId: data.userId,
          sourceId: data.sourceId,
          trigger: "timer",
          event: { timestamp: Math.floor(d.now() / 1000), interval_seconds: null },
        });
      }
    };
    this.ticks = new Worker(
      QUEUES.timers,
      async (job: Job) => {
        const data = timerJob.parse(job.data);
        const scheduledAt = job.timestamp + (job.opts.delay ?? 0);
        d.metrics.timerLag.observe(Math.max(0, d.now() - scheduledAt) / 1000);
        await d.runner.run({
          userId: data.userId,
          sourceId: data.sourceId,
          trigger: "timer",
          event: { timestamp: Math.floor(d.now() / 1000), interval_seconds: data.intervalSeconds ?? null },
        });
      },
      { connection: d.connection, prefix: d.prefix, concurrency: d.concurrency, autorun: false, ...WORKER_RECOVERY },
    );
    for (const w of [this.runs, this.ticks]) w.on("error", (err) => d.logger.error({ err }, "runtime worker error"));
  }

  start(): void {
    void this.runs.run();
    void this.ticks.run();
  }

  isRunning(): boolean {
    return this.runs.isRunning() && this.ticks.isRunning();
  }

  async close(): Promise<void> {
    await Promise.all([this.runs.close(), this.ticks.close()]);
  }
}
