import type { SourceRunJob } from "../queue/catalog.js";
import type { RequestGate } from "../store/request-gate.js";
import type { RequestAcceptance, RunStream, RunStreamStatus } from "../store/run-stream.js";

/** A source run to make durable; `id` (fan-out, timer ticks) makes a redo add nothing twice. */
export interface RunToAdd {
  readonly id?: string;
  readonly data: SourceRunJob;
}

/**
 * Where accepted source runs are made durable (docs/decisions.md "Source runs from a stream"): one
 * run stream entry each, or, past SOURCE_RUN_STREAM_PER_USER of the user's entries there, parked
 * until one of them settles (store/run-stream.ts). Either way the run is durable when this returns.
 */
export class SourceRunIntake {
  constructor(private readonly stream: RunStream) {}

  /** One run (an HTTP request, a timer tick). */
  async add(run: RunToAdd): Promise<RunStreamStatus> {
    const [status] = await this.addAll([run]);
    return status ?? "added";
  }

  /**
   * An HTTP request's run, added only once the request passed `gate` (its rates and quota), in the
   * same atomic step (store/scripts/source-request-accept.ts): one round trip.
   */
  accept(data: SourceRunJob, gate: RequestGate): Promise<RequestAcceptance> {
    return this.stream.accept(data.userId, JSON.stringify(data), gate);
  }

  /** Runs of several users at once (a fan-out batch), in one atomic step; returns what became of each. */
  addAll(runs: readonly RunToAdd[]): Promise<RunStreamStatus[]> {
    return this.stream.add(runs.map((r) => ({ userId: r.data.userId, json: JSON.stringify(r.data), id: r.id })));
  }
}
