import type { Queue } from "bullmq";
import type { SourceRunJob } from "../queue/catalog.js";
import { SOURCE_RUN_JOB_OPTS } from "../queue/job-options.js";
import type { RunBacklog } from "../store/run-backlog.js";
import type { RunStream, RunStreamStatus } from "../store/run-stream.js";

/** A source run to make durable; `id` (fan-out, timer ticks) makes a redo add nothing twice. */
export interface RunToAdd {
  readonly id?: string;
  readonly data: SourceRunJob;
}

/**
 * Where accepted source runs are made durable (docs/decisions.md "Source runs from a stream"):
 * the run stream, one entry per run, while the run's user has fewer than SOURCE_RUN_STREAM_PER_USER
 * entries there; past that, a BullMQ source-run job whose priority is its place in the user's
 * backlog (store/run-backlog.ts), as every run was before. Either way the run is durable when
 * this returns.
 */
export class SourceRunIntake {
  constructor(
    private readonly d: {
      stream: RunStream;
      backlog: RunBacklog;
      queue: Queue;
    },
  ) {}

  /** One run (an HTTP request, a timer tick). */
  async add(run: RunToAdd): Promise<RunStreamStatus> {
    const [status] = await this.addAll([run]);
    return status ?? "overflow";
  }

  /** Runs of several users at once (a fan-out batch); returns what became of each. */
  async addAll(runs: readonly RunToAdd[]): Promise<RunStreamStatus[]> {
    if (runs.length === 0) return [];
    const statuses = await this.d.stream.add(runs.map((r) => ({ userId: r.data.userId, json: JSON.stringify(r.data), id: r.id })));
    const over = runs.filter((_, i) => statuses[i] === "overflow");
    if (over.length > 0) await this.overflow(over);
    return statuses;
  }

  /** Queues runs in BullMQ; each run's priority is its place in its user's backlog: users are served round-robin. */
  private async overflow(runs: readonly RunToAdd[]): Promise<void> {
    const priorities = await this.d.backlog.reserveAll(runs.map((r) => r.data.userId));
    await this.d.queue.addBulk(
      runs.map((r, i) => ({
        name: r.data.kind,
        data: r.data,
        opts: { ...(r.id ? { jobId: r.id } : {}), priority: priorities[i] ?? 1, ...SOURCE_RUN_JOB_OPTS },
      })),
    );
  }
}
