import type { Middleware } from "koa";
import type { AckToken } from "../../store/replica-ack.js";

/** What the middleware needs of store/replica-ack.ts. */
export interface WriteAcknowledger {
  begin(): AckToken;
  confirm(token: AckToken): Promise<void>;
}

const READS = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * REDIS_MIN_REPLICAS_ACK (SPEC §8): a 2xx that acknowledges a write is sent only once the write is
 * on that many replicas (else 503, Retry-After: 1, from the error middleware around this one).
 * Writes are every 2xx of a method other than GET/HEAD/OPTIONS, and every 2xx of an HTTP source
 * endpoint (`/e/…`, which records a request whatever its method). The one place in the request
 * path that waits, after the handler and before the answer leaves.
 */
export function replicatedWrites(ack: WriteAcknowledger): Middleware {
  return async (ctx, next) => {
    const write = !READS.has(ctx.method) || ctx.path === "/e" || ctx.path.startsWith("/e/");
    if (!write) return next();
    const token = ack.begin();
    await next();
    if (ctx.status >= 200 && ctx.status < 300) await ack.confirm(token);
  };
}
