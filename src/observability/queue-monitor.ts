import type { Queue } from "bullmq";
import type { Metrics } from "./metrics.js";

/**
 * Samples queue depth and the age of the oldest waiting job every few seconds, so the backlog and
 * the lag of each queue show on a graph. Sampling errors are swallowed: observability never
 * throws into the caller.
 */
export class QueueMonitor {
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly queues: readonly Queue[],
    private readonly metrics: Metrics,
    private readonly intervalMs = 5000,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.sample(), this.intervalMs);
    this.timer.unref();
    void this.sample();
  }

  async sample(): Promise<void> {
    await Promise.all(
      this.queues.map(async (q) => {
        try {
          const counts = await q.getJobCounts("waiting", "delayed", "active", "failed");
          for (const [state, n] of Object.entries(counts)) this.metrics.queueDepth.set({ queue: q.name, state }, n);
          const [oldest] = await q.getJobs(["wait"], 0, 0, true);
          this.metrics.queueOldestAge.set({ queue: q.name }, oldest ? Math.max(0, Date.now() - oldest.timestamp) / 1000 : 0);
        } catch {
          // Redis unavailable: keep the last values; /readyz reports the outage.
        }
      }),
    );
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
