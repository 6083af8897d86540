import { Counter, Gauge, Histogram, collectDefaultMetrics, type Registry } from "prom-client";

/**
 * Every Tributary metric, registered on an injected registry (SPEC §7). Labels are
 * low-cardinality: never user ids, source ids or URLs.
 */
export type Metrics = ReturnType<typeof createMetrics>;

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/**
 * Increments of `tributary_events_ingested_total`, by emitter kind and channel class, held as plain
 * numbers until the counter is read: its `collect` (which every scrape and `get()` runs first) adds
 * them with prom-client's `inc`. An emit's labelled `inc` (the labels' check, their hash string, the
 * lookup) cost 180–280 ns; this costs two map lookups of constant strings.
 */
class PendingIngested {
  private readonly pending = new Map<string, Map<string, number>>();

  add(emitterKind: string, channelClass: string, n: number): void {
    let inner = this.pending.get(emitterKind);
    if (inner === undefined) {
      inner = new Map();
      this.pending.set(emitterKind, inner);
    }
    inner.set(channelClass, (inner.get(channelClass) ?? 0) + n);
  }

  /** Adds what is pending to `counter` and starts again from zero. */
  drainInto(counter: Counter<"emitter_kind" | "channel">): void {
    for (const [kind, inner] of this.pending) {
      for (const [channel, n] of inner) {
        if (n > 0) counter.inc({ emitter_kind: kind, channel }, n);
        inner.set(channel, 0);
      }
    }
  }
}

export function createMetrics(registry: Registry, opts: { defaultMetrics?: boolean } = {}) {
  if (opts.defaultMetrics !== false) collectDefaultMetrics({ register: registry });
  const registers = [registry];
  const ingested = new PendingIngested();
  let readiness: (() => Promise<boolean>) | undefined;
  let openCircuits: (() => Promise<number>) | undefined;
  return {
    registry,
    /** Wires `tributary_ready` to the process's readiness check (bounded, never throws; daemon.ts). */
    observeReadiness(probe: () => Promise<boolean>): void {
      readiness = probe;
    },
    /** Wires `tributary_circuits_open` to the count of open circuits in Redis (store/circuit.ts `countOpen`). */
    observeOpenCircuits(count: () => Promise<number>): void {
      openCircuits = count;
    },
    ready: new Gauge({
      name: "tributary_ready",
      help: "1 while this process is ready (what makes /readyz answer 200: Redis answers, its roles run), else 0; checked at scrape time (checks asked for at once share one run)",
      registers,
      async collect() {
        // Until wired (the CLI never is), the gauge keeps its initial 0.
        if (readiness) this.set((await readiness().catch(() => false)) ? 1 : 0);
      },
    }),
    httpRequestDuration: new Histogram({
      name: "tributary_http_request_duration_seconds",
      help: "HTTP request duration by route template, method (GET, POST... or other) and status class (2xx, 4xx...)",
      labelNames: ["route", "method", "status"] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    eventsIngested: new Counter({
      name: "tributary_events_ingested_total",
      help: "Events recorded, by emitter kind (source, workflow) and channel class (default, $errors, $logs, custom)",
      labelNames: ["emitter_kind", "channel"] as const,
      registers,
      collect() {
        ingested.drainInto(this);
      },
    }),
    /** Counts recorded events in `tributary_events_ingested_total` (added to it when it is read). */
    countIngested(emitterKind: string, channel: string, events: number): void {
      ingested.add(emitterKind, channelLabel(channel), events);
    },
    fanoutJobs: new Counter({
      name: "tributary_fanout_deliveries_total",
      help: "Deliveries created by fan-out (queued jobs and direct first attempts), by listener kind",
      labelNames: ["listener_kind"] as const,
      registers,
    }),
    fanoutDirect: new Counter({
      name: "tributary_fanout_direct_deliveries_total",
      help: "Deliveries whose first attempt fan-out made directly (no queue round), by listener kind",
      labelNames: ["listener_kind"] as const,
      registers,
    }),
    deliveries: new Counter({
      name: "tributary_deliveries_total",
      help: "Finished delivery attempts by listener kind and outcome (delivered, retry, failed, deactivated, skipped, undeliverable; rate_limited: an attempt put off by its webhook's rate limit, not made; circuit_open: one put off by its webhook's open circuit, not made; capped: one put off because its user or destination had DELIVERY_CONCURRENCY_PER_USER or _PER_DESTINATION attempts in flight; filtered: an event a subscription filter kept from a listener, source listeners included; filter_budget: one kept from a listener because the event's filters needed more than their budget)",
      labelNames: ["listener_kind", "outcome"] as const,
      registers,
    }),
    filterBudgetExceeded: new Counter({
      name: "tributary_filter_budget_exceeded_total",
      help: "Events whose subscription filters ran out of visits before answering, by the bound that stopped them (event: FILTER_VISITS_PER_EVENT; user: the emitting user's FILTER_VISITS_PER_SECOND_PER_USER)",
      labelNames: ["limit"] as const,
      registers,
    }),
    circuitTransitions: new Counter({
      name: "tributary_circuit_transitions_total",
      help: "Webhook circuit breaker transitions made by this process, by the state entered (open: opened or reopened after a failed probe; half_open: a probe started; closed)",
      labelNames: ["to"] as const,
      registers,
    }),
    circuitsOpen: new Gauge({
      name: "tributary_circuits_open",
      help: "Webhooks whose circuit is open or half open, across every process (read from Redis at each scrape; every process reports the same value)",
      registers,
      async collect() {
        // Until wired, and when Redis does not answer, the gauge keeps its last value.
        if (!openCircuits) return;
        try {
          this.set(await openCircuits());
        } catch {
          // Keep the last value; /readyz reports the outage.
        }
      },
    }),
    deliveryAttemptDuration: new Histogram({
      name: "tributary_delivery_attempt_duration_seconds",
      help: "Duration of one delivery attempt (HTTP round trip)",
      labelNames: ["listener_kind"] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    emitToDelivered: new Histogram({
      name: "tributary_emit_to_delivered_seconds",
      help: "Latency from event acceptance to successful delivery",
      labelNames: ["listener_kind"] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    healthEvents: new Counter({
      name: "tributary_health_events_total",
      help: "Health events (SPEC §12) by channel ($delivery_failed, $webhook_disabled, $webhook_recovered) and outcome (recorded; failed: could not be recorded, logged; skipped: the webhook was deleted)",
      labelNames: ["event_name", "outcome"] as const,
      registers,
    }),
    queueDepth: new Gauge({
      name: "tributary_queue_depth",
      help: "Jobs waiting or delayed per queue",
      labelNames: ["queue", "state"] as const,
      registers,
    }),
    queueOldestAge: new Gauge({
      name: "tributary_queue_oldest_waiting_age_seconds",
      help: "Age of the oldest waiting job per queue",
      labelNames: ["queue"] as const,
      registers,
    }),
    sourceRuns: new Counter({
      name: "tributary_source_runs_total",
      help: "Source runs by trigger (http, timer, event, hook) and outcome (ok, error, timeout, sandbox_error, skipped_quota, skipped_hops, skipped_busy)",
      labelNames: ["trigger", "outcome"] as const,
      registers,
    }),
    sourceRequests: new Counter({
      name: "tributary_source_requests_total",
      help: "Requests to HTTP source endpoints by outcome (accepted, unauthorized: inbound verification failed, not_found, rate_limited, too_large, run_failed, error)",
      labelNames: ["outcome"] as const,
      registers,
    }),
    sandboxRunDuration: new Histogram({
      name: "tributary_sandbox_run_duration_seconds",
      help: "Wall time of one sandboxed run",
      labelNames: ["trigger"] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    timerLag: new Histogram({
      name: "tributary_timer_lag_seconds",
      help: "Delay between a timer tick's scheduled time and the start of its run",
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    liveTailStreams: new Gauge({
      name: "tributary_sse_streams",
      help: "Live-tail (server-sent events) streams open on this process",
      registers,
    }),
    liveTailEvents: new Counter({
      name: "tributary_sse_events_sent_total",
      help: "Events written to live-tail streams (one per stream an event reaches)",
      registers,
    }),
    liveTailEnded: new Counter({
      name: "tributary_sse_streams_ended_total",
      help: "Live-tail streams ended by the daemon, by reason (slow_reader, stream_bytes, process_bytes, key_revoked, emitter_deleted, read_failed, shutdown)",
      labelNames: ["reason"] as const,
      registers,
    }),
    liveTailBufferedBytes: new Gauge({
      name: "tributary_sse_buffered_bytes",
      help: "Bytes this process holds for its live-tail streams: written but not yet taken by the client, plus queued",
      registers,
    }),
  };
}

/**
 * A response status as a metric label: its class (`2xx`, `4xx`...). customResponse sources choose
 * any status from 200 to 599, so exact statuses would let anyone add hundreds of series.
 */
const STATUS_CLASSES = ["1xx", "2xx", "3xx", "4xx", "5xx"] as const;

export function statusClassLabel(status: number): string {
  return Number.isInteger(status) && status >= 100 && status <= 599 ? (STATUS_CLASSES[Math.floor(status / 100) - 1] as string) : "other";
}

const METHOD_LABELS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);

/** A request method as a metric label: the common ones by name, the rest (PROPFIND, MKCOL...) as `other`. */
export function methodLabel(method: string): string {
  return METHOD_LABELS.has(method) ? method : "other";
}

/** Channel as a metric label: bounded to four values so user-chosen names never explode cardinality. */
export function channelLabel(channel: string): string {
  if (channel === "" || channel === "default") return "default";
  if (channel === "$errors" || channel === "$logs") return channel;
  return "custom";
}
