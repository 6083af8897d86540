import type { RedisClient } from "../store/context.js";
import { applyDedupe } from "../domain/dedupe.js";
import { AppError } from "../domain/errors.js";
import { newId, type RandomBytes } from "../domain/ids.js";
import type { EmitInput, Ingest } from "../events/ingest.js";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import { CompiledCodeCache, codeKey } from "./compiled-code.js";
import type { ComponentCatalog } from "./ports.js";
import { DedupeStateStore } from "../store/dedupe-state.js";
import type { Keys } from "../store/keys.js";
import type { RunComponent } from "../store/source-cache.js";
import type { SourceRecord, SourceStore } from "../store/sources.js";
import type { QuotaVerdict, Quotas } from "./quotas.js";
import { RunRecords } from "./run-records.js";
import type { HttpResponse, RunMethod, RunResult, SandboxService } from "./sandbox/types.js";

export type Trigger = "http" | "timer" | "event" | "hook";

/** Source-to-source deliveries allowed in one chain (SPEC §5). */
export const MAX_HOPS = 16;

/**
 * How long an inline (customResponse) run waits for an isolate while other users hold every one
 * of the inline pool (SOURCE_INLINE_ISOLATES); past it the request answers 503 with Retry-After.
 */
export const INLINE_ISOLATE_WAIT_MS = 2000;

export interface RunSpec {
  userId: string;
  sourceId: string;
  trigger: Exclude<Trigger, "hook">;
  event: unknown;
  /** Source-to-source deliveries so far in this chain. */
  hops?: number;
  onRespond?: (r: HttpResponse) => void;
  /**
   * Called once the sandbox is done with the run (before its events are recorded), when it ran:
   * an inline run's slot stands for a sandbox context, which is free from then on.
   */
  onSandboxDone?: () => void;
  /**
   * What the caller read and checked just now (an inline run: its request's locate and admit), so
   * the run does not read it again: the source, its component, the user's quota verdict.
   */
  checked?: { source: SourceRecord; component: RunComponent; quota: Extract<QuotaVerdict, { ok: true }> };
}

export type RunOutcome =
  | { status: "ok" | "error"; result: RunResult }
  | { status: "skipped"; reason: "missing" | "inactive" | "quota" | "hops" | "busy"; detail: string; retryAfterSeconds?: number };

export interface RunnerDeps {
  redis: RedisClient;
  keys: Keys;
  sandbox: SandboxService;
  /** A separate pool for runs that answer an HTTP request inline, so a flood of them cannot starve queued runs. */
  inlineSandbox: SandboxService;
  sources: SourceStore;
  components: ComponentCatalog;
  ingest: Ingest;
  quotas: Quotas;
  metrics: Metrics;
  logger: Logger;
  now: () => number;
  randomBytes: RandomBytes;
  /** Compiled code kept between runs (default: a new cache of DEFAULT_COMPILED_CACHE_BYTES). */
  compiledCache?: CompiledCodeCache;
  /** Where sources and components are read (default: from Redis each time). */
  records?: RunRecords;
}

/**
 * Runs a source's code in the sandbox and turns what it did into events: emits (after dedupe) on
 * their channels, console output on $logs, a thrown error or a time-out on $errors; then saves
 * its db state and counts the run against the user's quota.
 */
/**
 * Error codes of runs the sandbox failed rather than the component: isolated-vm or V8 lost control
 * (SANDBOX_ERROR, also a sandbox process that could not start) or the sandbox process ended under
 * the run (SANDBOX_CRASHED). Counted apart (`sandbox_error`), so the operator's alert is not about
 * users' code.
 */
const SANDBOX_FAILURES = new Set(["SANDBOX_ERROR", "SANDBOX_CRASHED"]);

/** A finished run's `tributary_source_runs_total` outcome, from its error code (none: ok). */
export function runOutcome(errorCode: string | undefined): "ok" | "timeout" | "sandbox_error" | "error" {
  if (errorCode === undefined) return "ok";
  if (errorCode === "TIMEOUT") return "timeout";
  return SANDBOX_FAILURES.has(errorCode) ? "sandbox_error" : "error";
}

export class SourceRunner {
  private readonly dedupe: DedupeStateStore;
  /** Compiled bundles by component and code hash: no Redis read of the bundle per run. */
  readonly compiledCache: CompiledCodeCache;
  private readonly records: RunRecords;

  constructor(private readonly d: RunnerDeps) {
    this.dedupe = new DedupeStateStore(d.redis, d.keys);
    this.compiledCache = d.compiledCache ?? new CompiledCodeCache();
    this.records = d.records ?? new RunRecords(d.sources, d.components);
  }

  async run(spec: RunSpec): Promise<RunOutcome> {
    const { d } = this;
    const checked = spec.checked;
    const source = checked?.source ?? (await this.records.source(spec.userId, spec.sourceId));
    if (!source) return { status: "skipped", reason: "missing", detail: "source was deleted" };
    if (!source.active) return { status: "skipped", reason: "inactive", detail: "source is inactive" };
    const hops = spec.hops ?? 0;
    if (hops > MAX_HOPS) {
      const detail = `a chain of source-to-source deliveries stopped after ${MAX_HOPS} hops`;
      await this.recordError(source, { code: "MAX_HOPS", msg: detail, stack: "", ts: new Date(d.now()).toISOString() }, spec.event, hops);
      d.metrics.sourceRuns.inc({ trigger: spec.trigger, outcome: "skipped_hops" });
      return { status: "skipped", reason: "hops", detail };
    }
    // The quota and the db state in one round trip (the db read is wasted when the quota refuses).
    const [quota, db] = await Promise.all([checked?.quota ?? d.quotas.check(spec.userId), d.sources.db(source.user_id, source.id)]);
    if (!quota.ok) {
      await this.recordError(
        source,
        { code: "QUOTA_EXCEEDED", msg: quota.reason, stack: "", ts: new Date(d.now()).toISOString() },
        spec.event,
        hops,
      );
      d.metrics.sourceRuns.inc({ trigger: spec.trigger, outcome: "skipped_quota" });
      return { status: "skipped", reason: "quota", detail: quota.reason, retryAfterSeconds: quota.retryAfterSeconds };
    }
    const component = checked?.component ?? (await this.records.component(spec.userId, source.component_id));
    const result = await this.execute(source, component, "run", spec.event, spec.onRespond, db ?? {});
    spec.onSandboxDone?.();
    if (result.error?.code === "SANDBOX_BUSY") {
      // Never started (every inline isolate held by other users): not the component's doing.
      d.metrics.sourceRuns.inc({ trigger: spec.trigger, outcome: "skipped_busy" });
      return { status: "skipped", reason: "busy", detail: result.error.msg, retryAfterSeconds: 1 };
    }
    // Independent writes, sent together.
    await Promise.all([
      d.quotas.record(spec.userId, quota.plan, result.durationMs),
      this.apply(source, component, result, spec.event, hops),
    ]);
    d.metrics.sourceRuns.inc({ trigger: spec.trigger, outcome: runOutcome(result.error?.code) });
    d.metrics.sandboxRunDuration.observe({ trigger: spec.trigger }, result.durationMs / 1000);
    return { status: result.error ? "error" : "ok", result };
  }

  /** Runs one method of a component for a source, with the source's stored db state. */
  async execute(
    source: SourceRecord,
    component: RunComponent,
    method: RunMethod,
    event?: unknown,
    onRespond?: (r: HttpResponse) => void,
    dbState?: Record<string, unknown>,
  ): Promise<RunResult> {
    const key = codeKey(component);
    const compiledCode = await this.compiledCache.get(key, () => this.d.components.compiled(source.user_id, component));
    const db = dbState ?? (await this.d.sources.db(source.user_id, source.id)) ?? {};
    const sandbox = onRespond ? this.d.inlineSandbox : this.d.sandbox;
    return sandbox.run({
      compiledCode,
      codeKey: key,
      userId: source.user_id,
      sourceId: source.id,
      method,
      props: source.configured_props,
      db,
      event,
      onRespond,
      ...(onRespond ? { maxWaitMs: INLINE_ISOLATE_WAIT_MS } : {}),
    });
  }

  /** Records what a run or hook did and saves its db state. */
  async apply(source: SourceRecord, component: RunComponent, result: RunResult, originalEvent: unknown, hops: number): Promise<void> {
    const { d } = this;
    const userId = source.user_id;
    if (result.dbChanged) await d.sources.saveDb(userId, source.id, result.db);
    let kept = result.emits;
    const strategy = component.dedupe;
    if (strategy && kept.length > 0) {
      // Atomic: concurrent runs of the source each see the ids the other kept.
      const emits = kept;
      kept = await this.dedupe.update(userId, source.id, (state) => {
        const deduped = applyDedupe(strategy, emits, state);
        return { state: deduped.state, result: deduped.kept };
      });
    }
    const records: EmitInput[] = kept.map((e) => ({
      event: e.event,
      name: e.meta.name === "default" ? "" : (e.meta.name ?? ""),
      meta: {
        ...(e.meta.id !== undefined ? { id: e.meta.id } : {}),
        ...(e.meta.summary !== undefined ? { summary: e.meta.summary } : {}),
        ...(e.meta.ts !== undefined ? { ts: e.meta.ts } : {}),
      },
    }));
    for (const log of result.logs) records.push({ event: { ts: log.ts, k: log.k, msg: log.msg }, name: "$logs", meta: {} });
    if (records.length > 0) await this.recordEmits(source, records, originalEvent, hops);
    if (result.error) await this.recordError(source, result.error, originalEvent, hops);
  }

  /**
   * Records a run's emits. Past one of the user's storage limits (429 limit_exceeded) running again
   * cannot help, so the run is not failed for it: the refusal goes to the source's $errors (when
   * that stream can take it) and to the log.
   */
  private async recordEmits(source: SourceRecord, records: readonly EmitInput[], originalEvent: unknown, hops: number): Promise<void> {
    const { d } = this;
    try {
      await d.ingest.recordFor(source.user_id, source.id, "source", records, hops);
    } catch (err) {
      if (!(err instanceof AppError && err.code === "limit_exceeded")) throw err;
      d.logger.warn({ userId: source.user_id, sourceId: source.id, err: err.message }, "source emits not recorded: storage limit");
      const error = { code: "LIMIT_EXCEEDED", msg: err.message, stack: "", ts: new Date(d.now()).toISOString() };
      await this.recordError(source, error, originalEvent, hops).catch(() => undefined);
    }
  }

  /** An $errors record in the documented shape. */
  async recordError(
    source: SourceRecord,
    error: { code: string; msg: string; stack: string; ts: string },
    originalEvent: unknown,
    hops: number,
  ): Promise<void> {
    const event = {
      error,
      original_event: originalEvent ?? null,
      original_context: { id: newId("emit_", this.d.randomBytes), ts: new Date(this.d.now()).toISOString(), emitter_id: source.id },
    };
    await this.d.ingest.recordFor(source.user_id, source.id, "source", [{ event, name: "$errors", meta: {} }], hops);
    this.d.logger.debug(
      { userId: source.user_id, sourceId: source.id, code: error.code },
      `source ${source.id}: the run failed (${error.code}: ${error.msg.slice(0, 200)}); recorded on its $errors channel`,
    );
  }
}
