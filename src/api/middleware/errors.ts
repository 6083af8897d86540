import type { Context } from "koa";
import type { Logger } from "../../observability/logger.js";
import { AppError, PayloadTooLargeError, UnavailableError, ValidationError } from "../../domain/errors.js";

/** Errors thrown by co-body / raw-body carry these fields. */
interface HttpLikeError {
  status?: number;
  statusCode?: number;
  type?: string;
  expose?: boolean;
  message?: string;
}

/**
 * Redis being down shows up as these ioredis/BullMQ errors: answer 503, not 500. "Command timed
 * out" is ioredis's `commandTimeout` (a stalled Redis, see daemon.ts). On a Redis Cluster, a MOVED
 * or ASK that reaches here was not followed: ioredis follows them for a command alone, not inside an
 * auto-pipeline whose commands were redirected to different slots (seen during a failover, when a
 * replica not yet promoted answers MOVED for its master's slots); the command did not run.
 */
function isRedisUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const name = err.name;
  const msg = err.message;
  return (
    name === "MaxRetriesPerRequestError" ||
    msg === "Command timed out" ||
    /Connection is closed|Stream isn't writeable|ECONNREFUSED|ECONNRESET|connect ETIMEDOUT|LOADING|READONLY|MISCONF|NOREPLICAS|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|^MOVED |^ASK |sentinels are unreachable|^Cluster isn't ready/.test(
      msg,
    )
  );
}

/** Maps anything thrown into the closed set of AppErrors. Unknown errors become undefined (→ 500). */
export function toAppError(err: unknown): AppError | undefined {
  if (err instanceof AppError) return err;
  if (isRedisUnavailable(err)) return new UnavailableError("storage is unavailable, retry shortly");
  const e = err as HttpLikeError;
  const status = e?.status ?? e?.statusCode;
  if (e?.type === "entity.too.large" || status === 413) return new PayloadTooLargeError();
  if (status === 400 && /forbidden prototype property/.test(e?.message ?? "")) {
    return new ValidationError("request body must not contain __proto__ or constructor.prototype keys", "invalid_body");
  }
  if (e?.type === "entity.parse.failed" || (err instanceof SyntaxError && status === 400))
    return new ValidationError("request body is not valid JSON", "invalid_json");
  if (status === 415) {
    return new AppError(415, "unsupported_media_type", "unsupported Content-Encoding");
  }
  if (e?.type === "encoding.unsupported" || e?.type === "charset.unsupported") {
    return new ValidationError("request body has an unsupported encoding", "invalid_body");
  }
  const code = (err as { code?: unknown })?.code;
  if (typeof code === "string" && /^(Z_|ERR__ERROR_FORMAT|ERR_BROTLI)/.test(code)) {
    return new ValidationError("request body does not match its Content-Encoding", "invalid_body");
  }
  if (e?.type === "request.aborted") return new ValidationError("request was aborted", "request_aborted");
  if (typeof status === "number" && status >= 400 && status < 500) {
    return new AppError(status, "bad_request", e.expose && e.message ? e.message : "bad request");
  }
  return undefined;
}

/**
 * The one place that turns errors into responses: `{"error": "<message>", "code": "<snake_case>"}`.
 * Expected 4xx log at debug; anything unknown is logged in full and answered with a generic 500.
 * Two synchronous halves, which the app's outermost layer calls around routing (api/app.ts: one
 * async function for the metrics and the error answers, not one each).
 */
export function errorAnswers(logger: Logger) {
  return {
    /** After routing: a 404 or 405 nothing answered gets its JSON body. */
    unanswered(ctx: Context): void {
      if (ctx.status === 404 && ctx.body === undefined) {
        ctx.status = 404;
        ctx.body = { error: `no route for ${ctx.method} ${ctx.path}`, code: "route_not_found" };
      } else if ((ctx.status === 405 || ctx.status === 501) && !ctx.body) {
        const allow = ctx.response.get("allow");
        ctx.status = 405;
        ctx.body = {
          error: `method ${ctx.method} is not allowed on ${ctx.path}${allow ? `; allowed: ${allow}` : ""}`,
          code: "method_not_allowed",
        };
      }
    },
    /** Whatever routing threw or rejected with, as the answer. */
    failed(ctx: Context, err: unknown): void {
      const known = toAppError(err);
      if (known) {
        if (known.status >= 500) logger.warn({ err, code: known.code, path: ctx.path }, "request failed");
        else logger.debug({ code: known.code, path: ctx.path }, known.message);
        ctx.status = known.status;
        ctx.set(known.headers);
        ctx.body = { error: known.message, code: known.code };
        return;
      }
      logger.error({ err, method: ctx.method, path: ctx.path }, "unhandled error");
      ctx.status = 500;
      ctx.body = { error: "internal server error", code: "internal_error" };
    },
  };
}
