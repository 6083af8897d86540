import type { Context } from "koa";
import { applyFieldFilter, parseFieldFilter } from "../domain/fields.js";
import { parsePageRequest, type PageInfo, type PageRequest } from "../domain/pagination.js";

/**
 * Request parameters: the query string, overlaid by the JSON body when it is an object (SPEC §2:
 * body wins). Repeated query keys take their first value. Unknown parameters are ignored by callers.
 */
export function params(ctx: Context): Record<string, unknown> {
  const out: Record<string, unknown> = Object.create(null);
  for (const [k, v] of Object.entries(ctx.query)) out[k] = Array.isArray(v) ? v[0] : v;
  const body = (ctx.request as { body?: unknown }).body;
  if (body && typeof body === "object" && !Array.isArray(body)) {
    for (const [k, v] of Object.entries(body)) out[k] = v;
  }
  return out;
}

export function pageRequest(ctx: Context): PageRequest {
  return parsePageRequest(params(ctx));
}

/** include/exclude, body over query like `params`, without copying every parameter. */
function filterOf(ctx: Context) {
  const body = (ctx.request as { body?: unknown }).body;
  const fromBody = body && typeof body === "object" && !Array.isArray(body) ? (body as Record<string, unknown>) : undefined;
  // No query string, no query parameters: skip Koa's parsed-query lookup (most requests).
  const query = ctx.querystring === "" ? undefined : ctx.query;
  const pick = (k: string): unknown => {
    if (fromBody && Object.hasOwn(fromBody, k)) return fromBody[k];
    const v = query?.[k];
    return Array.isArray(v) ? v[0] : v;
  };
  return parseFieldFilter(pick("include"), pick("exclude"));
}

/** `{data: object}` with include/exclude applied to the object's top-level keys. */
export function sendData(ctx: Context, data: object, status = 200): void {
  ctx.status = status;
  ctx.body = { data: applyFieldFilter(data, filterOf(ctx)) };
}

/** `{page_info, data: [...]}`; include/exclude apply to items, never to page_info. */
export function sendPage(ctx: Context, page: { data: readonly object[]; page_info: PageInfo }): void {
  const filter = filterOf(ctx);
  ctx.status = 200;
  ctx.body = { page_info: page.page_info, data: page.data.map((d) => applyFieldFilter(d, filter)) };
}

/** `{data: [...]}` for the unpaginated lists. */
export function sendList(ctx: Context, items: readonly object[]): void {
  const filter = filterOf(ctx);
  ctx.status = 200;
  ctx.body = { data: items.map((d) => applyFieldFilter(d, filter)) };
}

/** An empty answer: 204, or 202 for accepted asynchronous work (Koa turns a null body into 204, so 202 gets ""). */
export function noContent(ctx: Context, status = 204): void {
  ctx.body = status === 204 ? null : "";
  ctx.status = status;
}
