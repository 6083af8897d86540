import { Router } from "@koa/router";
import type { Context, Middleware } from "koa";
import { UnauthorizedError, ValidationError } from "../../domain/errors.js";
import { isEventId } from "../../domain/ids.js";
import { HEARTBEAT_FRAME } from "../../domain/server-sent-events.js";
import type { LiveTail, TailSink } from "../../events/live-tail.js";
import type { EmitterKind } from "../../store/events.js";
import type { SourceService } from "../../services/sources.js";
import { parseEventName } from "../../services/subscriptions.js";
import type { WorkflowService } from "../../services/workflows.js";
import { type Authenticator, bearer, userIdOf } from "../middleware/auth.js";
import { params, sendData } from "../params.js";
import type { RouteModule } from "../app.js";

export interface LiveTailRouteDeps {
  readonly tail: LiveTail;
  readonly authenticator: Authenticator;
  /** The digest API keys are indexed by (undefined for a string that cannot be a key). */
  readonly keyDigest: (apiKey: string) => string | undefined;
  readonly sources: SourceService;
  readonly workflows: WorkflowService;
}

const SSE_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache, no-transform",
  connection: "keep-alive",
  // Proxies (nginx) must pass frames through as they come.
  "x-accel-buffering": "no",
};

/** `/…/sse` and `/sse/…`: the paths the live-tail router may answer (checked before /v1 dispatch). */
export function isLiveTailPath(path: string): boolean {
  return path.endsWith("/sse") || path.startsWith("/sse/");
}

/** A source id from a Pipedream URL form, which may leave out the `dc_` prefix. */
function sourceIdOf(raw: string): string {
  return raw.startsWith("dc_") ? raw : `dc_${raw}`;
}

function lastEventIdOf(ctx: Context, query: Record<string, unknown>): string | undefined {
  const raw = ctx.get("last-event-id") || query.last_event_id;
  if (raw === undefined || raw === "") return undefined;
  if (!isEventId(raw)) throw new ValidationError("Last-Event-ID must be an event id (<ms>-<seq>)", "invalid_cursor");
  return raw;
}

/**
 * The live tail over HTTP (SPEC §9): the stream routes (every URL form) and browser tokens. A
 * stream answers its errors (401, 404, 429) as JSON before the first byte; after that it is a
 * `text/event-stream` response that Koa leaves to the live tail.
 */
export function liveTailRoutes(deps: LiveTailRouteDeps): { v1: RouteModule; streams: Middleware; router: Router } {
  /** The user behind the API key, or behind a browser token issued for this source, and the key's digest. */
  const authorize = async (
    ctx: Context,
    query: Record<string, unknown>,
    kind: EmitterKind,
    emitterId: string,
  ): Promise<{ userId: string; keyDigest: string }> => {
    const key = bearer(ctx);
    if (key) {
      const userId = await deps.authenticator.authenticate(key);
      const keyDigest = deps.keyDigest(key);
      if (!userId || keyDigest === undefined) throw new UnauthorizedError("invalid or revoked API key");
      return { userId, keyDigest };
    }
    const token = query.token;
    if (typeof token !== "string" || token === "") {
      throw new UnauthorizedError("missing Authorization: Bearer <API key> header or ?token= from POST /v1/sources/{id}/sse_tokens");
    }
    const grant = kind === "source" ? await deps.tail.tokenGrant(token) : undefined;
    if (grant?.status === "key_rotated") {
      throw new UnauthorizedError(
        "this token was issued with an API key that has since been rotated or revoked; get a new one from POST /v1/sources/{id}/sse_tokens",
      );
    }
    if (grant?.status !== "valid" || grant.sourceId !== emitterId)
      throw new UnauthorizedError("invalid or expired token for this source's streams");
    return { userId: grant.userId, keyDigest: grant.keyDigest };
  };

  const stream = (kind: EmitterKind, fixedChannel?: string) => async (ctx: Context) => {
    const raw = (ctx as Context & { params: { id: string } }).params.id;
    const emitterId = kind === "source" ? sourceIdOf(raw) : raw;
    const query = params(ctx);
    const { userId, keyDigest } = await authorize(ctx, query, kind, emitterId);
    // A foreign or unknown id is a 404 before the stream opens.
    const emitter = kind === "source" ? await deps.sources.get(userId, emitterId) : await deps.workflows.get(userId, emitterId);
    const channel = fixedChannel ?? parseEventName(query.event_name, { required: false });
    const lastEventId = lastEventIdOf(ctx, query);
    if (ctx.method === "HEAD") {
      // What a GET would answer, without opening a stream (a HEAD response has no body to stream into).
      ctx.status = 200;
      ctx.set(SSE_HEADERS);
      return;
    }

    const res = ctx.res;
    const head = () => {
      if (!res.headersSent) res.writeHead(200, SSE_HEADERS);
    };
    const sink: TailSink = {
      write: (frame) => {
        head();
        return res.write(frame);
      },
      onDrain: (fn) => res.once("drain", fn),
      buffered: () => res.writableLength,
      end: () => {
        head();
        res.end();
      },
      destroy: () => res.destroy(),
    };
    ctx.req.socket.setTimeout(0);
    ctx.req.socket.setNoDelay(true);
    let close: () => void;
    try {
      close = await deps.tail.open({ userId, kind, emitterId: emitter.id, channel, lastEventId, keyDigest }, sink);
    } catch (err) {
      if (!res.headersSent) throw err;
      ctx.respond = false;
      res.end();
      return;
    }
    ctx.respond = false;
    // The first bytes go out now, so the client sees the stream open before the first event.
    sink.write(HEARTBEAT_FRAME);
    if (res.writableEnded || res.destroyed) {
      close();
      return;
    }
    await new Promise<void>((resolve) => res.once("close", () => resolve()));
    close();
  };

  const router = new Router({ sensitive: true });
  router.get("/v1/sources/:id/sse", stream("source"));
  router.get("/v1/workflows/:id/sse", stream("workflow"));
  router.get("/sources/:id/sse", stream("source"));
  router.get("/sse/dc/:id/emits", stream("source"));
  router.get("/sse/dc/:id/observations", stream("source", "$logs"));
  const routes = router.routes() as unknown as Middleware;
  const allowed = router.allowedMethods({ throw: false }) as unknown as Middleware;

  const v1: RouteModule = (r) => {
    r.post("/sources/:id/sse_tokens", async (ctx) => {
      const userId = userIdOf(ctx);
      const source = await deps.sources.get(userId, ctx.params.id);
      // The request passed requireUser, so its key is a valid one: the token is bound to it.
      const keyDigest = deps.keyDigest(bearer(ctx) ?? "");
      if (keyDigest === undefined) throw new UnauthorizedError();
      const { token, expiresAtMs } = await deps.tail.issueToken(userId, source.id, keyDigest);
      // Epoch seconds, as every *_at of the API document.
      sendData(ctx, { token, expires_at: Math.floor(expiresAtMs / 1000) });
    });
  };
  return { v1, streams: (ctx, next) => routes(ctx, () => allowed(ctx, next)), router };
}
