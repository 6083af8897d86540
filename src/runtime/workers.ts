import { type ConnectionOptions, type Job, Worker } from "bullmq";
import type { RedisClient } from "../store/context.js";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import { QUEUES, type SourceRunJob, sourceRunJob, timerJob } from "../queue/catalog.js";
import { WORKER_RECOVERY } from "../queue/worker-options.js";
import type { RunBacklog } from "../store/run-backlog.js";
import type { RunStream } from "../store/run-stream.js";

/** Where a consumer's blocking reads of the run streams go (store/run-stream.ts). */
export interface RunReads {
  readonly blocking: RedisClient;
  readonly open?: (name: string) => RedisClient;
}
import { parseBody } from "./http-request.js";
import { RunConsumer } from "./run-consumer.js";
import type { SourceRunIntake } from "./run-intake.js";
import { RunSlots } from "./run-slots.js";
import type { SourceRunner } from "./runner.js";

function parsePayload(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** The id a timer tick's run is put in the run stream under: a tick job redone after a crash adds no second run. */
export const tickRunId = (sourceId: string, scheduledAtMs: number): string => `tick_${sourceId}_${scheduledAtMs}`;

/**
 * The worker side of the runtime (docs/guide/writing-sources.md "Queued runs"): source runs read from the run
 * stream (HTTP requests, deliveries to source listeners, timer ticks), BullMQ source-run jobs
 * (queued by versions before the run stream: drained during a rolling upgrade), and the timer
 * ticks the job schedulers produce (each put in the run stream). Both kinds of runs share
 * SOURCE_RUN_CONCURRENCY slots. A run's failure is recorded
 * on $errors by the runner, so a run only fails for infrastructure errors (Redis down): a stream
 * entry is then left pending and redone, a job is kept failed for inspection.
 */
export class RuntimeWorkers {
  private readonly runs: Worker;
  private readonly ticks: Worker;
  private readonly consumer: RunConsumer;
  readonly slots: RunSlots;

  constructor(d: {
    connection: ConnectionOptions;
    /** BullMQ prefixes of the source-run and timers queues (each queue has its own tag). */
    prefixes: { sourceRun: string; timers: string };
    concurrency: number;
    runner: SourceRunner;
    /** Counts each user's BullMQ-queued runs (store/run-backlog.ts; jobs of earlier versions). */
    backlog: RunBacklog;
    /** Where timer ticks' runs go (the run stream). */
    intake: SourceRunIntake;
    /** The run streams as this process's consumer reads them (their read groups block on `reads`). */
    stream: (reads: RunReads) => RunStream;
    /** A dedicated connection for the run streams' blocking reads (closed with the workers) and, on a cluster, how to open more. */
    reads: RunReads;
    /** This process's consumer name in the run stream's group. */
    consumer: string;
    /** Stream entries idle this long are taken over from a dead consumer. */
    claimIdleMs: number;
    logger: Logger;
    metrics: Metrics;
    now: () => number;
  }) {
    const slots = new RunSlots(d.concurrency);
    this.slots = slots;
    const runJob = async (data: SourceRunJob): Promise<void> => {
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
          event: { timestamp: Math.floor(d.now() / 1000), interval_seconds: data.intervalSeconds ?? null },
        });
      }
    };
    this.consumer = new RunConsumer({
      stream: d.stream(d.reads),
      blocking: d.reads.blocking,
      consumer: d.consumer,
      slots,
      claimIdleMs: d.claimIdleMs,
      execute: runJob,
      logger: d.logger,
    });
    this.runs = new Worker(
      QUEUES.sourceRun,
      async (job: Job) => {
        const data = sourceRunJob.parse(job.data);
        await slots.take("queue");
        try {
          await runJob(data);
        } finally {
          slots.release();
        }
        // The job ends (completes) after this: the run leaves its user's backlog. A worker killed
        // before here redoes the run (the job stalls) and counts it out then.
        await d.backlog.done(data.userId).catch((err) => d.logger.warn({ err }, "run backlog count failed"));
      },
      { connection: d.connection, prefix: d.prefixes.sourceRun, concurrency: d.concurrency, autorun: false, ...WORKER_RECOVERY },
    );
    this.ticks = new Worker(
      QUEUES.timers,
      async (job: Job) => {
        const data = timerJob.parse(job.data);
        const scheduledAt = job.timestamp + (job.opts.delay ?? 0);
        d.metrics.timerLag.observe(Math.max(0, d.now() - scheduledAt) / 1000);
        // The tick's run is made durable like any other; the job ends once it is.
        await d.intake.add({
          id: tickRunId(data.sourceId, scheduledAt),
          data: { kind: "timer", userId: data.userId, sourceId: data.sourceId, intervalSeconds: data.intervalSeconds ?? null },
        });
      },
      { connection: d.connection, prefix: d.prefixes.timers, concurrency: d.concurrency, autorun: false, ...WORKER_RECOVERY },
    );
    for (const w of [this.runs, this.ticks]) w.on("error", (err) => d.logger.error({ err }, "runtime worker error"));
  }

  async start(): Promise<void> {
    await this.consumer.start();
    void this.runs.run();
    void this.ticks.run();
  }

  isRunning(): boolean {
    return this.runs.isRunning() && this.ticks.isRunning() && this.consumer.isRunning();
  }

  async close(): Promise<void> {
    await Promise.all([this.runs.close(), this.ticks.close(), this.consumer.close()]);
  }
}
