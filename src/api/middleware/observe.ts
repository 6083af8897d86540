import type { Context } from "koa";
import { type Metrics, methodLabel, statusClassLabel } from "../../observability/metrics.js";

/**
 * Records a finished request in the duration histogram, labelled by route template (never the raw
 * path, which carries ids), method and status class, so cardinality stays bounded whatever
 * callers and components send. `startedMs` is `performance.now()` when the request came in; the
 * app's outermost layer (api/app.ts) calls this once the answer is settled, errors included.
 */
export function requestRecorder(metrics: Metrics) {
  return function record(ctx: Context, startedMs: number): void {
    const route = (ctx as Context & { _matchedRoute?: string | RegExp })._matchedRoute;
    metrics.httpRequestDuration.observe(
      {
        route: typeof route === "string" ? route : (ctx.state.routeLabel ?? "unmatched"),
        method: methodLabel(ctx.method),
        status: statusClassLabel(ctx.status),
      },
      (performance.now() - startedMs) / 1000,
    );
  };
}
