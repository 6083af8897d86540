import type { Queue } from "bullmq";
import type { Context, Middleware, Next } from "koa";
import { checkCustomResponse } from "../domain/custom-response.js";
import { type AppError, NotFoundError, SourceRunFailedError, TooManyRequestsError } from "../domain/errors.js";
import { SOURCE_RUN_JOB_OPTS } from "../queue/job-options.js";
import type { Logger } from "../observability/logger.js";
import type { SourceRunJob } from "../queue/catalog.js";
import type { ComponentService } from "../services/components.js";
import type { Keys } from "../store/keys.js";
import type { SourceRecord, SourceStore } from "../store/sources.js";
import { type HttpEvent, lowerCaseHeaders, parseBody, readBody } from "./http-request.js";
import type { Quotas } from "./quotas.js";
import type { RateLimiter } from "./rate-limit.js";
import type { SourceRunner } from "./runner.js";
import type { HttpResponse } from "./sandbox/types.js";

export interface EndpointDeps {
  sources: SourceStore;
  components: ComponentService;
  runner: SourceRunner;
  quotas: Quotas;
  limiter: RateLimiter;
  /** The per-user ingress rate (services/ingress-rate.ts): each request counts one event. */
  ingress?: { admit(userId: string, events: number): Promise<void> };
  keys: Keys;
  queue: Queue;
  bodyLimitBytes: number;
  logger: Logger;
  now: () => number;
}

const PATH = /^\/e\/([A-Za-z0-9]{8,64})(\/.*)?$/;

function buildEvent(ctx: Context, subPath: string | undefined, raw: Buffer): HttpEvent {
  const bodyRaw = raw.toString("utf8");
  return {
    method: ctx.method,
    path: subPath && subPath !== "" ? subPath : "/",
    query: { ...ctx.query },
    headers: lowerCaseHeaders(ctx.req.headers),
    bodyRaw,
    body: parseBody(bodyRaw, ctx.get("content-type")),
  };
}

/** Sends the component's answer; false when it may not be sent (see domain/custom-response.ts). */
function sendCustom(ctx: Context, d: EndpointDeps, sourceId: string, r: HttpResponse): { sent: true } | { sent: false; problem: string } {
  const checked = checkCustomResponse(r.status, r.headers);
  if (!checked.ok) return { sent: false, problem: checked.problem };
  if (checked.dropped.length > 0) d.logger.debug({ sourceId, dropped: checked.dropped }, "custom response headers dropped");
  ctx.status = checked.status;
  for (const [k, v] of Object.entries(checked.headers)) {
    try {
      ctx.set(k, v);
    } catch {
      // Whatever node:http still refuses from user code is dropped, not a 500.
    }
  }
  ctx.body = r.body;
  return { sent: true };
}

/**
 * HTTP source endpoints (`PUBLIC_URL/e/<token>` and any sub-path, any method). Without a custom
 * response the request is made durable as a source-run job and answered 200 at once; with one,
 * the run happens here and its first `this.http.respond()` is the answer.
 */
export function sourceEndpoints(d: EndpointDeps): Middleware {
  return async function endpoint(ctx: Context, next: Next): Promise<void> {
    const m = PATH.exec(ctx.path);
    if (!m) {
      if (ctx.path === "/e" || ctx.path.startsWith("/e/")) throw new NotFoundError("no such endpoint", "endpoint_not_found");
      return next();
    }
    ctx.state.routeLabel = "/e/:token";
    const [, token, subPath] = m;
    const target = await d.sources.endpoint(token as string);
    const source = target ? await d.sources.get(target.userId, target.sourceId) : undefined;
    if (!source?.active || source.endpoint_token !== token) throw new NotFoundError("no such endpoint", "endpoint_not_found");

    const wait = await d.limiter.take(d.keys.sourceRate(source.user_id, source.id));
    if (wait > 0) throw new TooManyRequestsError("this endpoint is receiving too many requests", wait / 1000);
    await d.ingress?.admit(source.user_id, 1);
    const quota = await d.quotas.check(source.user_id);
    if (!quota.ok) throw new TooManyRequestsError(quota.reason, quota.retryAfterSeconds, "quota_exceeded");

    const event = buildEvent(ctx, subPath, await readBody(ctx.req, d.bodyLimitBytes));
    const component = await d.components.require(source.user_id, source.component_id);
    const httpProp = component.configurable_props.find((p) => p.name === source.http_prop);
    if (!httpProp?.customResponse) {
      const job: SourceRunJob = {
        kind: "http",
        userId: source.user_id,
        sourceId: source.id,
        request: { method: event.method, path: event.path, query: event.query, headers: event.headers, bodyRaw: event.bodyRaw },
        acceptedAtMs: d.now(),
      };
      await d.queue.add("http", job, SOURCE_RUN_JOB_OPTS);
      ctx.status = 200;
      ctx.body = { success: true };
      return;
    }
    await respondInline(ctx, d, source, event);
  };
}

/**
 * Inline runs in flight in this process, per source and per user. Each holds an isolate for up to
 * the run time limit, so one user's slow or looping component must not take them all.
 */
export const INLINE_RUNS_PER_SOURCE = 2;
export const INLINE_RUNS_PER_USER = 4;

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

const inFlight = new InFlight();

/** Runs the source now and answers with its first respond(); a run that never responds gets a clear error. */
async function respondInline(ctx: Context, d: EndpointDeps, source: SourceRecord, event: HttpEvent): Promise<void> {
  const userId = source.user_id;
  const sourceId = source.id;
  if (inFlight.count(sourceId) >= INLINE_RUNS_PER_SOURCE || inFlight.count(userId) >= INLINE_RUNS_PER_USER) {
    throw new TooManyRequestsError("too many requests to this source are being answered right now", 1, "too_many_inline_runs");
  }
  inFlight.add(sourceId, 1);
  inFlight.add(userId, 1);
  // The slot is held until the run ends, which may be after it responded.
  const release = () => {
    inFlight.add(sourceId, -1);
    inFlight.add(userId, -1);
  };
  let run: Promise<unknown> | undefined;
  try {
    const answer = await runInline(ctx, d, source, event);
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
async function runInline(
  ctx: Context,
  d: EndpointDeps,
  source: SourceRecord,
  event: HttpEvent,
): Promise<{ run: Promise<unknown>; error?: AppError }> {
  const { user_id: userId, id: sourceId } = source;
  let answered: (r: HttpResponse) => void = () => {};
  const response = new Promise<HttpResponse>((resolve) => {
    answered = resolve;
  });
  const run = d.runner.run({ userId, sourceId, trigger: "http", event, onRespond: (r) => answered(r) });
  const first = await Promise.race([response.then((r) => ({ r })), run.then((o) => ({ o }))]);
  if ("r" in first) {
    // The run goes on after responding; its emits are recorded when it ends.
    run.catch((err) => d.logger.error({ err, sourceId }, "source run failed after responding"));
    const sent = sendCustom(ctx, d, sourceId, first.r);
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
    return { run, error: new NotFoundError("no such endpoint", "endpoint_not_found") };
  }
  const failure = outcome.result.error;
  if (!failure) return { run, error: new SourceRunFailedError("no_response") };
  return { run, error: new SourceRunFailedError(failure.code === "TIMEOUT" ? "timed_out" : "failed") };
}
