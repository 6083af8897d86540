import type { Queue } from "bullmq";
import type { Metrics } from "./metrics.js";

/**
 * The shard outboxes and their fan-out consumer groups (store/outbox-stream.ts), sampled as the one
 * queue "outbox": lengths and pending counts summed over the shards, the oldest entry of any shard.
 */
export interface OutboxProbe {
  stats(): Promise<{ length: number; pending: number; oldestMs: number | undefined }>;
}

/**
 * Samples queue depth and the age of the oldest waiting job every few seconds, so the backlog and
 * the lag of each queue show on a graph. The outbox counts as a queue too ("outbox": entries not
 * yet read are `waiting`, read but not acknowledged ones, direct first attempts in flight among
 * them, are `active`; its age is that of the oldest entry, since handed-off entries are deleted).
 * Sampling errors are swallowed: observability never throws into the caller.
 */
export class QueueMonitor {
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly queues: readonly Queue[],
    private readonly metrics: Metrics,
    private readonly intervalMs = 5000,
    private readonly outbox?: OutboxProbe,
    /** The run stream of queued source runs (store/run-stream.ts), sampled as the queue "runs" like the outbox. */
    private readonly runs?: OutboxProbe,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.sample(), this.intervalMs);
    this.timer.unref();
    void this.sample();
  }

  async sample(): Promise<void> {
    await Promise.all([
      this.sampleStream("outbox", this.outbox),
      this.sampleStream("runs", this.runs),
      ...this.queues.map(async (q) => {
        try {
          const counts = await q.getJobCounts("waiting", "delayed", "active", "failed");
          for (const [state, n] of Object.entries(counts)) this.metrics.queueDepth.set({ queue: q.name, state }, n);
          const [oldest] = await q.getJobs(["wait"], 0, 0, true);
          this.metrics.queueOldestAge.set({ queue: q.name }, oldest ? Math.max(0, Date.now() - oldest.timestamp) / 1000 : 0);
        } catch {
          // Redis unavailable: keep the last values; /readyz reports the outage.
        }
      }),
    ]);
  }

  private async sampleStream(queue: string, probe: OutboxProbe | undefined): Promise<void> {
    if (!probe) return;
    try {
      const { length, pending, oldestMs } = await probe.stats();
      this.metrics.queueDepth.set({ queue, state: "waiting" }, Math.max(0, length - pending));
      this.metrics.queueDepth.set({ queue, state: "active" }, pending);
      this.metrics.queueOldestAge.set({ queue }, oldestMs !== undefined ? Math.max(0, Date.now() - oldestMs) / 1000 : 0);
    } catch {
      // As above: keep the last values.
    }
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
