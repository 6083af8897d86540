import type { Context, Next } from "koa";
import { type Metrics, methodLabel, statusClassLabel } from "../../observability/metrics.js";

/**
 * Records every request in the duration histogram, labelled by route template (never the raw
 * path, which carries ids), method and status class, so cardinality stays bounded whatever
 * callers and components send.
 */
export function observeRequests(metrics: Metrics) {
  return async function observe(ctx: Context, next: Next): Promise<void> {
    const started = process.hrtime.bigint();
    try {
      await next();
    } finally {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const route = (ctx as Context & { _matchedRoute?: string | RegExp })._matchedRoute;
      metrics.httpRequestDuration.observe(
        {
          route: typeof route === "string" ? route : (ctx.state.routeLabel ?? "unmatched"),
          method: methodLabel(ctx.method),
          status: statusClassLabel(ctx.status),
        },
        seconds,
      );
    }
  };
}
