import type { IncomingMessage } from "node:http";
import type { Context, Middleware, Next } from "koa";
import { checkCustomResponse, ENDPOINT_ANSWER_HEADERS } from "../../domain/custom-response.js";
import { AppError, NotFoundError, PayloadTooLargeError, SourceRunFailedError } from "../../domain/errors.js";
import type { Logger } from "../../observability/logger.js";
import type { Metrics } from "../../observability/metrics.js";
import { type HttpEvent, lowerCaseHeaders, parseBody } from "../../runtime/http-request.js";
import type { HttpResponse } from "../../runtime/sandbox/types.js";
import type { SendResponse, SourceRequests } from "../../runtime/source-requests.js";

export interface SourceEndpointOptions {
  bodyLimitBytes: number;
  logger: Logger;
  metrics: Pick<Metrics, "sourceRequests">;
}

const PATH = /^\/e\/([A-Za-z0-9]{8,64})(\/.*)?$/;

/** `/e` and everything below it: the paths this middleware answers (a 404 when no token matches). */
export function isEndpointPath(path: string): boolean {
  return path === "/e" || path.startsWith("/e/");
}

/** Reads the whole body up to `limit` bytes; more is a 413 (the rest is not buffered). */
export async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers["content-length"] ?? 0);
  if (declared > limit) throw new PayloadTooLargeError();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buf = chunk as Buffer;
    size += buf.length;
    if (size > limit) throw new PayloadTooLargeError();
    chunks.push(buf);
  }
  return Buffer.concat(chunks);
}

/**
 * The run's event. `raw` is the very buffer inbound verification checked; `bodyRaw` is its UTF-8
 * text, which is the exact body for every UTF-8 body (a byte sequence that is not UTF-8 reads as
 * U+FFFD there; verification is never done on that text).
 */
function buildEvent(ctx: Context, subPath: string | undefined, headers: Record<string, string>, raw: Buffer): HttpEvent {
  const bodyRaw = raw.toString("utf8");
  return {
    method: ctx.method,
    path: subPath && subPath !== "" ? subPath : "/",
    query: { ...ctx.query },
    headers,
    bodyRaw,
    body: parseBody(bodyRaw, ctx.get("content-type")),
  };
}

/** Sends the component's answer; false when it may not be sent (see domain/custom-response.ts). */
function sender(ctx: Context, logger: Logger, sourceId: string): SendResponse {
  return (r: HttpResponse) => {
    const checked = checkCustomResponse(r.status, r.headers);
    if (!checked.ok) return { sent: false, problem: checked.problem };
    if (checked.dropped.length > 0) logger.debug({ sourceId, dropped: checked.dropped }, "custom response headers dropped");
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
  };
}

/** A source endpoint request's outcome as a metric label (`tributary_source_requests_total`). */
export function requestOutcome(err: unknown): string {
  if (err === undefined) return "accepted";
  if (err instanceof SourceRunFailedError) return "run_failed";
  if (!(err instanceof AppError)) return "error";
  switch (err.status) {
    case 401:
      return "unauthorized";
    case 404:
      return "not_found";
    case 413:
      return "too_large";
    case 429:
      return "rate_limited";
    default:
      return "error";
  }
}

/**
 * HTTP source endpoints (`PUBLIC_URL/e/<token>` and any sub-path, any method): the HTTP side of
 * runtime/source-requests.ts. Without a custom response the request is made durable and answered
 * 200 at once; with one, the run's first `this.http.respond()` is the answer.
 *
 * Order: the token (404), the whole body (413), inbound verification on those exact bytes (401),
 * then the rates and quota (429): a request that fails verification spends nothing of its
 * source's, and runs nothing.
 *
 * Every answer of an endpoint path, errors included, carries `ENDPOINT_ANSWER_HEADERS`: they are
 * set before anything can answer, and the error middleware and `checkCustomResponse` leave them.
 */
export function sourceEndpoints(requests: SourceRequests, opts: SourceEndpointOptions): Middleware {
  return async function endpoint(ctx: Context, next: Next): Promise<void> {
    if (!isEndpointPath(ctx.path)) return next();
    ctx.set(ENDPOINT_ANSWER_HEADERS);
    const m = PATH.exec(ctx.path);
    if (!m) {
      opts.metrics.sourceRequests.inc({ outcome: "not_found" });
      throw new NotFoundError("no such endpoint", "endpoint_not_found");
    }
    ctx.state.routeLabel = "/e/:token";
    const [, token, subPath] = m;
    try {
      const source = await requests.locate(token as string);
      const body = await readBody(ctx.req, opts.bodyLimitBytes);
      const headers = lowerCaseHeaders(ctx.req.headers);
      requests.authorize(source, { headers, body });
      const taken = await requests.accept(source, buildEvent(ctx, subPath, headers, body), sender(ctx, opts.logger, source.id));
      if (taken === "queued") {
        ctx.status = 200;
        ctx.body = { success: true };
      }
      opts.metrics.sourceRequests.inc({ outcome: "accepted" });
    } catch (err) {
      opts.metrics.sourceRequests.inc({ outcome: requestOutcome(err) });
      throw err;
    }
  };
}
