import { type ConnectionOptions, type Job, Worker } from "bullmq";
import type { Logger } from "../observability/logger.js";
import { maintenanceJob, QUEUES } from "../queue/catalog.js";
import { WORKER_RECOVERY } from "../queue/worker-options.js";
import type { EventStore } from "../store/events.js";
import type { PayloadStore } from "../store/payloads.js";

/** Works asynchronous chores: event deletion for DELETE /sources/{id}/events (answers 202 first). */
export class MaintenanceWorker {
  private readonly worker: Worker;

  constructor(d: {
    connection: ConnectionOptions;
    prefix: string;
    events: EventStore;
    /** The events' stored payloads (store/payloads.ts) go with them: their waiting deliveries end failed. */
    payloads?: Pick<PayloadStore, "deleteRange">;
    logger: Logger;
  }) {
    this.worker = new Worker(
      QUEUES.maintenance,
      async (job: Job) => {
        const data = maintenanceJob.parse(job.data);
        const removed = await d.events.deleteRange(data.userId, data.emitterId, data.channel, data.startId, data.endId);
        const payloads = (await d.payloads?.deleteRange(data.userId, data.emitterId, data.channel, data.startId, data.endId)) ?? 0;
        d.logger.debug({ emitterId: data.emitterId, removed, payloads }, "events deleted");
      },
      { connection: d.connection, prefix: d.prefix, concurrency: 4, autorun: false, ...WORKER_RECOVERY },
    );
    this.worker.on("error", (err) => d.logger.error({ err }, "maintenance worker error"));
  }

  start(): void {
    void this.worker.run();
  }

  isRunning(): boolean {
    return this.worker.isRunning();
  }

  async close(): Promise<void> {
    await this.worker.close();
  }
}
