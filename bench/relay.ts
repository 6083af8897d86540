/**
 * Relay end to end to a webhook (issue 12 item 7): the same closed-loop load (a fixed number of
 * connections for a fixed time) on three ingresses whose events one webhook subscription delivers
 * to the bench's receiver, counted there:
 * - single emits to a workflow (`POST /v1/workflows/<id>/events`, as the `single` phase does);
 * - an HTTP source endpoint (`/e/<token>`) whose trivial component emits the request body from a
 *   queued run;
 * - the same with a custom response: the run is inline and emits, then `this.http.respond()`s.
 * Each variant warms up at the same load first; the measurement then runs the load, waits until
 * the receiver has an event per accepted request (or the deadline), and prices it all (ingest,
 * runs, fan-out, delivery) per delivered event.
 */
import { performance } from "node:perf_hooks";
import type { Cost } from "./meter.js";
import { hammerStatus, type StatusLoopResult } from "./load.js";
import type { Receiver } from "./receiver.js";
import { sleep } from "./stats.js";

/** A trivial HTTP source with a custom response: emits the request body, then answers. */
export const INLINE_RELAY_COMPONENT = `module.exports = {
  name: "Bench HTTP inline relay",
  version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(e) { this.$emit(e.body); this.http.respond({ status: 200, body: "ok" }); },
};`;

export type RelayVariant = "single" | "queued" | "inline";

export interface RelayRun {
  readonly variant: RelayVariant;
  /** The closed-loop load; `ok` are the accepted requests (202 emits, 200 source answers). */
  readonly load: StatusLoopResult;
  /**
   * Events the receiver should get: one per accepted request. The load generator stops with up to
   * a request per connection unanswered, which the daemon may still accept: a few more may arrive.
   */
  readonly expected: number;
  /** Events the receiver got from the load's start until everything arrived (or the deadline). */
  readonly delivered: number;
  /** Accepted events not yet delivered when the load stopped. */
  readonly inFlightAtLoadEnd: number;
  /** From the load's start to the last arrival, s. */
  readonly spanS: number;
  /** delivered / spanS. */
  readonly perSec: number;
  readonly complete: boolean;
  /** Measured from the load's start to the last arrival; per delivered event. */
  readonly cost: Cost;
}

export interface RelayTarget {
  readonly variant: RelayVariant;
  /** Where the load goes (an absolute URL). */
  readonly url: string;
  readonly headers?: Record<string, string>;
  /** The request body, carrying one small event. */
  readonly body: string;
  /** The status of an accepted request. */
  readonly expect: number;
}

export interface RelayLoad {
  readonly receiver: Receiver;
  readonly connections: number;
  readonly durationS: number;
  readonly warmupS: number;
  /** How long the deliveries may take after the load stopped, s. */
  readonly deadlineS: number;
  /** Starts the CPU and Redis meter over the deployment. */
  meter(): Promise<(units: number) => Promise<Cost>>;
  /** Waits until the daemon is quiet (outbox empty, no delivery job). */
  quiesce(label: string): Promise<void>;
  ensureAlive(): void;
  log(msg: string): void;
}

/** One variant: warm-up (delivered and quiet before the measurement), then the measured load. */
export async function relayRun(o: RelayLoad, t: RelayTarget): Promise<RelayRun> {
  const { receiver } = o;
  const load = (durationS: number) =>
    hammerStatus({ url: t.url, body: t.body, headers: t.headers, durationS, connections: o.connections, expect: t.expect });
  receiver.reset();
  if (o.warmupS > 0) {
    const warm = await load(o.warmupS);
    // Every warm-up event must have arrived, or it would be counted as a measured one.
    if (!(await receiver.waitFor(warm.ok, o.deadlineS * 1000))) {
      throw new Error(`relay ${t.variant}: ${receiver.count()} of ${warm.ok} warm-up events delivered within ${o.deadlineS} s`);
    }
    // The load generator stops with up to a request per connection unanswered, which the daemon
    // may have accepted: let their events arrive too (no arrival for half a second).
    const settleBy = performance.now() + o.deadlineS * 1000;
    for (let seen = -1; seen !== receiver.count() && performance.now() < settleBy; ) {
      seen = receiver.count();
      await sleep(500);
    }
    await o.quiesce(`after the ${t.variant} relay warm-up`);
  }
  receiver.reset();
  const meter = await o.meter();
  const t0 = performance.now();
  const r = await load(o.durationS);
  if (r.ok === 0) throw new Error(`relay ${t.variant}: no request accepted (answers ${JSON.stringify(r.statuses)})`);
  const inFlightAtLoadEnd = Math.max(0, r.ok - receiver.count());
  const complete = await receiver.waitFor(r.ok, o.deadlineS * 1000);
  const delivered = receiver.count();
  const cost = await meter(delivered);
  o.ensureAlive();
  const w = receiver.window();
  const spanS = w ? (w.last - t0) / 1000 : Number.NaN;
  return {
    variant: t.variant,
    load: r,
    expected: r.ok,
    delivered,
    inFlightAtLoadEnd,
    spanS,
    perSec: spanS > 0 ? delivered / spanS : Number.NaN,
    complete,
    cost,
  };
}
