import { BullMQAdapter } from "@bull-board/api/bullMQAdapter";
import { createBullBoard } from "@bull-board/api";
import { appRoutes } from "@bull-board/api/dist/routes.js";
import { KoaAdapter } from "@bull-board/koa";
import type { Queue } from "bullmq";
import type { Middleware } from "koa";
import type { Logger } from "../observability/logger.js";
import { toAppError } from "./middleware/errors.js";

/** Where the queue dashboard lives; app.ts puts the admin-session guard in front of it. */
export const QUEUE_BOARD_PATH = "/admin/queues";

/**
 * The dashboard page loads its scripts and styles from the daemon only (its Google Fonts link is
 * refused, so it falls back to the system font). Inline styles are the UI's own.
 */
export const QUEUE_BOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "base-uri 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");

/**
 * bull-board (`@bull-board/koa`) over the daemon's queues, mounted at /admin/queues. It must only
 * be reached through the admin guard. Its own error handler would show any error's message with a
 * 500; ours answers like the rest of the daemon: 4xx as given, Redis trouble 503, else a generic
 * 500 whose details go to the log.
 */
export interface QueueBoard {
  readonly middleware: Middleware;
  /** The methods its routes answer (its page is GET; its JSON API uses more). */
  readonly methods: readonly string[];
}

export function queueBoard(queues: readonly Queue[], logger: Logger): QueueBoard {
  const adapter = new KoaAdapter();
  adapter.setBasePath(QUEUE_BOARD_PATH);
  createBullBoard({
    queues: queues.map((q) => new BullMQAdapter(q)),
    serverAdapter: adapter,
    options: { uiConfig: { boardTitle: "Tributary queues" } },
  });
  adapter.setErrorHandler((err: Error) => {
    const known = toAppError(err);
    // bull-board's type lists the statuses its own handlers use; the adapter sends any status.
    if (known) return { status: known.status as 400, body: { error: known.message, code: known.code } };
    logger.error({ err }, "queue dashboard error");
    return { status: 500, body: { error: "internal server error", code: "internal_error" } };
  });
  const board = adapter.registerPlugin() as unknown as Middleware;
  const methods = new Set<string>([appRoutes.entryPoint, ...appRoutes.api].flatMap((r) => r.method).map((m) => m.toUpperCase()));
  return {
    methods: [...methods].sort(),
    middleware: async (ctx, next) => {
      ctx.set("content-security-policy", QUEUE_BOARD_CSP);
      ctx.set("x-content-type-options", "nosniff");
      ctx.set("cache-control", "no-store");
      await board(ctx, next);
    },
  };
}
