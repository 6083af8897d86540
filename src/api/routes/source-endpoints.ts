import type { IncomingMessage } from "node:http";
import type { Context, Middleware, Next } from "koa";
import { checkCustomResponse } from "../../domain/custom-response.js";
import { NotFoundError, PayloadTooLargeError } from "../../domain/errors.js";
import type { Logger } from "../../observability/logger.js";
import { type HttpEvent, lowerCaseHeaders, parseBody } from "../../runtime/http-request.js";
import type { HttpResponse } from "../../runtime/sandbox/types.js";
import type { SendResponse, SourceRequests } from "../../runtime/source-requests.js";

export interface SourceEndpointOptions {
  bodyLimitBytes: number;
  logger: Logger;
}

const PATH = /^\/e\/([A-Za-z0-9]{8,64})(\/.*)?$/;

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

/**
 * HTTP source endpoints (`PUBLIC_URL/e/<token>` and any sub-path, any method): the HTTP side of
 * runtime/source-requests.ts. Without a custom response the request is made durable and answered
 * 200 at once; with one, the run's first `this.http.respond()` is the answer.
 */
export function sourceEndpoints(requests: SourceRequests, opts: SourceEndpointOptions): Middleware {
  return async function endpoint(ctx: Context, next: Next): Promise<void> {
    const m = PATH.exec(ctx.path);
    if (!m) {
      if (ctx.path === "/e" || ctx.path.startsWith("/e/")) throw new NotFoundError("no such endpoint", "endpoint_not_found");
      return next();
    }
    ctx.state.routeLabel = "/e/:token";
    const [, token, subPath] = m;
    const source = await requests.admit(token as string);
    const event = buildEvent(ctx, subPath, await readBody(ctx.req, opts.bodyLimitBytes));
    const taken = await requests.take(source, event, sender(ctx, opts.logger, source.id));
    if (taken === "queued") {
      ctx.status = 200;
      ctx.body = { success: true };
    }
  };
}
