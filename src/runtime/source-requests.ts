import {
  type AppError,
  NotFoundError,
  SourceRunFailedError,
  TooManyRequestsError,
  UnauthorizedError,
  UnavailableError,
} from "../domain/errors.js";
import { type InboundRequest, verifyInbound } from "../domain/inbound-auth.js";
import type { Logger } from "../observability/logger.js";
import type { SourceRunJob } from "../queue/catalog.js";
import type { IngressCharge } from "../store/events.js";
import type { Keys } from "../store/keys.js";
import type { RunComponent } from "../store/source-cache.js";
import type { SourceRecord } from "../store/sources.js";
import type { HttpEvent } from "./http-request.js";
import type { QuotaVerdict, Quotas } from "./quotas.js";
import type { RateLimiter } from "../store/rate-limit.js";
import type { GateVerdict, RequestGate, RequestGates } from "../store/request-gate.js";
import type { SourceRunIntake } from "./run-intake.js";
import type { RunRecords } from "./run-records.js";
import type { RunSpec, SourceRunner } from "./runner.js";
import type { HttpResponse } from "./sandbox/types.js";

export interface SourceRequestDeps {
  /** Where the token's source and its component are read (store/source-cache.ts behind it, in the daemon). */
  records: RunRecords;
  runner: SourceRunner;
  quotas: Quotas;
  limiter: RateLimiter;
  /** A request answered by its run: its rates and quota in one step (store/request-gate.ts). */
  gates: RequestGates;
  /** The per-user ingress rate (services/ingress-rate.ts): each request counts one event. */
  ingress?: IngressGate;
  keys: Keys;
  /** Where queued runs are made durable (the run stream, or the BullMQ overflow). */
  runs: SourceRunIntake;
  logger: Logger;
  now: () => number;
  /** customResponse runs of one source at once in this process (SOURCE_INLINE_CONCURRENCY; default 2). */
  inlinePerSource?: number;
}

/**
 * Inline runs in flight in this process, per source (SOURCE_INLINE_CONCURRENCY, this by default)
 * and per user (this, or the per-source setting if larger). Each holds a context of its user's
 * isolate for up to the run time limit, so one user's slow or looping component must not take
 * them all.
 */
export const DEFAULT_INLINE_RUNS_PER_SOURCE = 2;
export const INLINE_RUNS_PER_USER = 4;

/** The per-user ingress rate as an endpoint takes it: in the same step as the source's rate. */
export interface IngressGate {
  /** What the rate step takes from the user's bucket (undefined: unlimited); throws 413 for more than it holds. */
  charge(userId: string, events: number): IngressCharge | undefined;
  /** The 429 for a bucket that could not pay within `waitMs`. */
  refused(waitMs: number): Error;
}

/** A request's quota verdict once admitted: handed to the inline run, so it does not check it again. */
export type Admitted = Extract<QuotaVerdict, { ok: true }>;

/** Sends a component's custom answer; `sent: false` when it may not be sent (domain/custom-response.ts). */
export type SendResponse = (r: HttpResponse) => { sent: true } | { sent: false; problem: string };

function quotaRefusal(verdict: Extract<QuotaVerdict, { ok: false }>): Error {
  return new TooManyRequestsError(verdict.reason, verdict.retryAfterSeconds, "quota_exceeded");
}

class InFlight {
  private readonly counts = new Map<string, number>();
  count(key: string): number {
    return this.counts.get(key) ?? 0;
  }
  add(key: string, delta: number): void {
    const n = this.count(key) + delta;
    if (n <= 0) this.counts.delete(key);
    else this.counts.set(key, n);
  }
}

/**
 * Requests to HTTP source endpoints, as the runtime sees them (SPEC §5): locate (token), authorize
 * (inbound verification, SPEC §12), then accept: admit (rates, quota) and make the event durable as
 * a queued run (run-intake.ts) in one step, or admit, run it now and hand its first
 * `this.http.respond()` to the caller. The HTTP side lives in api/routes/source-endpoints.ts.
 */
export class SourceRequests {
  private readonly inFlight = new InFlight();
  private readonly perSource: number;
  private readonly perUser: number;

  constructor(private readonly d: SourceRequestDeps) {
    this.perSource = d.inlinePerSource ?? DEFAULT_INLINE_RUNS_PER_SOURCE;
    this.perUser = Math.max(INLINE_RUNS_PER_USER, this.perSource);
  }

  /** The active source behind `token`; anything else is a 404, whoever asks. */
  async locate(token: string): Promise<SourceRecord> {
    const d = this.d;
    const target = await d.records.endpoint(token);
    const source = target ? await d.records.source(target.userId, target.sourceId) : undefined;
    if (!source?.active || source.endpoint_token !== token) throw new NotFoundError("no such endpoint", "endpoint_not_found");
    return source;
  }

  /**
   * Checks a request against the source's inbound verification (SPEC §12), on its exact body
   * bytes: a 401 naming the problem when it fails. Called before `accept`, so a forged request
   * spends neither the source's rate nor its user's quota (docs/decisions.md).
   */
  authorize(source: SourceRecord, request: InboundRequest): void {
    if (!source.http_auth) return;
    const verdict = verifyInbound(source.http_auth, request, Math.floor(this.d.now() / 1000));
    if (!verdict.ok) throw new UnauthorizedError(verdict.problem);
  }

  /**
   * Takes a located and authorized request. Without a custom response its run is made durable
   * (run-intake.ts: the run stream) in the same step that takes the source's rate, its user's
   * ingress rate and checks the quota ("queued": the caller answers 200 at once); with one, the
   * request is admitted, then the source runs now and its first `this.http.respond()` goes to `send`
   * ("answered"). A refused request throws the error to answer with (429).
   */
  async accept(source: SourceRecord, event: HttpEvent, send: SendResponse): Promise<"queued" | "answered"> {
    const component = await this.d.records.component(source.user_id, source.component_id);
    const httpProp = component.configurable_props.find((p) => p.name === source.http_prop);
    if (!httpProp?.customResponse) {
      await this.enqueue(source, event);
      return "queued";
    }
    const admitted = await this.admit(source);
    await this.respond(source, component, event, send, admitted);
    return "answered";
  }

  /**
   * Admits one more request to `source` once its rate, its user's ingress rate and quota allow, in
   * one step (store/scripts/source-request-admit.ts); returns the quota verdict (for the run).
   */
  private async admit(source: SourceRecord): Promise<Admitted> {
    const { gate, plan } = await this.gate(source);
    const refused = this.refusal(await this.d.gates.admit(gate));
    if (refused) throw refused;
    return { ok: true, plan };
  }

  /** A queued request: its rates, quota and run in one step (store/scripts/source-request-accept.ts). */
  private async enqueue(source: SourceRecord, event: HttpEvent): Promise<void> {
    const d = this.d;
    const { gate } = await this.gate(source);
    const job: SourceRunJob = {
      kind: "http",
      userId: source.user_id,
      sourceId: source.id,
      request: { method: event.method, path: event.path, query: event.query, headers: event.headers, bodyRaw: event.bodyRaw },
      acceptedAtMs: d.now(),
    };
    const taken = await d.runs.accept(job, gate);
    if (taken.admitted) return;
    // The script adds the run unless a gate refused: never answer 200 for a run not added.
    throw this.refusal(taken) ?? new UnavailableError("the request could not be queued; retry shortly", 1);
  }

  /**
   * What a request to `source` must pass: the source's rate, its user's ingress rate and, for a
   * free user, the day's quota (runtime/quotas.ts decides a paid or missing user here: no quota in
   * the gate, or a 429 without a round trip).
   */
  private async gate(source: SourceRecord): Promise<{ gate: RequestGate; plan: "free" | "paid" }> {
    const d = this.d;
    const userId = source.user_id;
    const charge = d.ingress?.charge(userId, 1);
    const quota = await d.quotas.gate(userId);
    let plan: "free" | "paid" = "free";
    if ("decided" in quota) {
      if (!quota.decided.ok) throw quotaRefusal(quota.decided);
      plan = quota.decided.plan;
    }
    const gate: RequestGate = {
      rate: d.limiter.gate(d.keys.sourceRate(userId, source.id)),
      ...(charge ? { charge } : {}),
      ...("usageKey" in quota ? { quota } : {}),
    };
    return { gate, plan };
  }

  /** The error to answer a request its gate refused with (the first gate that refused it), or undefined. */
  private refusal(v: GateVerdict): Error | undefined {
    if (v.rateWait > 0) return new TooManyRequestsError("this endpoint is receiving too many requests", v.rateWait / 1000);
    if (v.chargeWait > 0 && this.d.ingress) return this.d.ingress.refused(v.chargeWait);
    const verdict = this.d.quotas.verdict(v.quota);
    return verdict.ok ? undefined : quotaRefusal(verdict);
  }

  /** Runs the source now and sends its first respond(); a run that never responds is a clear error. */
  private async respond(
    source: SourceRecord,
    component: RunComponent,
    event: HttpEvent,
    send: SendResponse,
    admitted?: Admitted,
  ): Promise<void> {
    const userId = source.user_id;
    const sourceId = source.id;
    const inFlight = this.inFlight;
    if (inFlight.count(sourceId) >= this.perSource || inFlight.count(userId) >= this.perUser) {
      throw new TooManyRequestsError("too many requests to this source are being answered right now", 1, "too_many_inline_runs");
    }
    inFlight.add(sourceId, 1);
    inFlight.add(userId, 1);
    // The slot stands for a sandbox context: it is held until the sandbox is done with the run,
    // which may be after it responded, but not while the run's events are recorded (a client that
    // sends its next request as soon as it has the answer would meet its own slot still taken).
    let held = true;
    const release = () => {
      if (!held) return;
      held = false;
      inFlight.add(sourceId, -1);
      inFlight.add(userId, -1);
    };
    let run: Promise<unknown> | undefined;
    try {
      const answer = await this.runInline(source, event, send, admitted && { source, component, quota: admitted }, release);
      run = answer.run;
      if (answer.error) throw answer.error;
    } finally {
      if (run) void run.finally(release).catch(() => {});
      else release();
    }
  }

  /**
   * Answers the request, or returns the error to answer with; returns the run, which may still be
   * going on after it responded. The caller is anonymous: when the run fails, its error goes to the
   * source's $errors (the runner records it) and the answer is a generic SourceRunFailedError.
   */
  private async runInline(
    source: SourceRecord,
    event: HttpEvent,
    send: SendResponse,
    checked: RunSpec["checked"],
    onSandboxDone: () => void,
  ): Promise<{ run: Promise<unknown>; error?: AppError }> {
    const d = this.d;
    const { user_id: userId, id: sourceId } = source;
    let answered: (r: HttpResponse) => void = () => {};
    const response = new Promise<HttpResponse>((resolve) => {
      answered = resolve;
    });
    const run = d.runner.run({
      userId,
      sourceId,
      trigger: "http",
      event,
      onRespond: (r) => answered(r),
      onSandboxDone,
      ...(checked ? { checked } : {}),
    });
    const first = await Promise.race([response.then((r) => ({ r })), run.then((o) => ({ o }))]);
    if ("r" in first) {
      // The run goes on after responding; its emits are recorded when it ends.
      run.catch((err) => d.logger.error({ err, sourceId }, "source run failed after responding"));
      const sent = send(first.r);
      if (!sent.sent) {
        const error = { code: "INVALID_RESPONSE", msg: sent.problem, stack: "", ts: new Date(d.now()).toISOString() };
        await d.runner.recordError(source, error, event, 0).catch((err) => d.logger.error({ err, sourceId }, "recording $errors failed"));
        return { run, error: new SourceRunFailedError("invalid_response") };
      }
      // Wrapped: returning the bare promise would make this function wait for the run to end.
      return { run };
    }
    const outcome = first.o;
    if (outcome.status === "skipped") {
      if (outcome.reason === "quota") {
        return { run, error: new TooManyRequestsError(outcome.detail, outcome.retryAfterSeconds ?? 60, "quota_exceeded") };
      }
      if (outcome.reason === "busy") {
        return {
          run,
          error: new UnavailableError("every sandbox for answering requests is busy; retry shortly", outcome.retryAfterSeconds ?? 1),
        };
      }
      return { run, error: new NotFoundError("no such endpoint", "endpoint_not_found") };
    }
    const failure = outcome.result.error;
    if (!failure) return { run, error: new SourceRunFailedError("no_response") };
    return { run, error: new SourceRunFailedError(failure.code === "TIMEOUT" ? "timed_out" : "failed") };
  }
}
