import type { Router, RouterMiddleware } from "@koa/router";
import type { Middleware } from "koa";

/** What a route module registers its routes on: the verbs the API uses, paths relative to the prefix. */
export interface RouteRegistrar {
  get(path: string, ...middleware: RouterMiddleware[]): unknown;
  post(path: string, ...middleware: RouterMiddleware[]): unknown;
  put(path: string, ...middleware: RouterMiddleware[]): unknown;
  delete(path: string, ...middleware: RouterMiddleware[]): unknown;
}

/** A resource name: the first segment of every route of a group (`/workflows/:id/events` → `workflows`). */
const RESOURCE = /^[A-Za-z0-9_$-]+$/;

/** A segment of a route's path: a literal or a named parameter (`:id`), so every route has a fixed depth. */
const SEGMENT = /^(?::[A-Za-z_][A-Za-z0-9_]*|[A-Za-z0-9_$.-]+)$/;

/**
 * How many segments `path` has after `from`, a trailing slash aside (`/v1/workflows/x/events` from 3
 * → 3, and so with a `/` at the end): the depth of the routes it can match, as @koa/router matches
 * a path with or without its trailing slash and a parameter never spans a `/`.
 */
export function depthAt(path: string, from: number): number {
  let depth = 0;
  const end = path.length > from + 1 && path.charCodeAt(path.length - 1) === 47 ? path.length - 1 : path.length;
  for (let i = from; i < end; i++) if (path.charCodeAt(i) === 47) depth++;
  return depth;
}

/** The first segment of `path` after `from` (`/v1/workflows/x` from 3 → `workflows`), "" when none. */
export function segmentAt(path: string, from: number): string {
  if (path.charCodeAt(from) !== 47) return "";
  const end = path.indexOf("/", from + 1);
  return path.slice(from + 1, end === -1 ? path.length : end);
}

/**
 * The routes under one prefix (the /v1 API) as one router per resource (the first segment of
 * their paths) and depth (their number of segments). @koa/router tests every layer of a router
 * against each request (a regular expression and a debug call with its argument array per layer),
 * which for the /v1 API's fifty routes cost more per emit than the rest of the routing: a request
 * now meets only the routes of its resource and depth (an emit two layers of the workflows' seven).
 * Each group's router is made by `make` (the prefix and case-sensitivity), so a group behaves as
 * the one router did: an unknown resource or depth goes on to `next` (404), a known path with
 * another method gets its 405 and `Allow` from its group, which holds every route that can match
 * that path (a route of another depth never can: its segments are literals and `:name`s).
 *
 * `shared` (the API-key check and the JSON body reader) goes first on every route's own stack
 * rather than on a router-level `use` layer: it still runs only for a request whose path and
 * method matched a route (a 404 or 405 never asks for a key), and a request meets one layer fewer
 * (@koa/router matches, captures, wraps and composes each matched layer: about 0.5 µs a request).
 */
export class RouteGroups implements RouteRegistrar {
  /** Routers by resource, then by depth. */
  private readonly groups = new Map<string, Router[]>();
  private dispatchers: Map<string, (Middleware | undefined)[]> | undefined;

  constructor(
    private readonly prefix: string,
    private readonly make: () => Router,
    private readonly allowed: (router: Router) => Middleware,
    /** Middleware every route runs before its own, in this order. */
    private readonly shared: readonly RouterMiddleware[] = [],
  ) {}

  get(path: string, ...middleware: RouterMiddleware[]): void {
    this.groupOf(path).get(path, ...this.shared, ...middleware);
  }
  post(path: string, ...middleware: RouterMiddleware[]): void {
    this.groupOf(path).post(path, ...this.shared, ...middleware);
  }
  put(path: string, ...middleware: RouterMiddleware[]): void {
    this.groupOf(path).put(path, ...this.shared, ...middleware);
  }
  delete(path: string, ...middleware: RouterMiddleware[]): void {
    this.groupOf(path).delete(path, ...this.shared, ...middleware);
  }

  /** Every group's router (the route table, the OpenAPI check). */
  routers(): Router[] {
    return [...this.groups.values()].flatMap((byDepth) => byDepth.filter((r) => r !== undefined));
  }

  /**
   * The middleware that hands a request under the prefix to its resource's router (then its
   * 405 answer); anything else goes on to `next`. Built once, on the first call: register every
   * route before.
   */
  dispatch(): Middleware {
    if (this.dispatchers === undefined) {
      this.dispatchers = new Map();
      for (const [resource, byDepth] of this.groups) {
        this.dispatchers.set(
          resource,
          Array.from(byDepth, (router): Middleware | undefined => {
            if (router === undefined) return undefined;
            const routes = router.routes() as unknown as Middleware;
            const allowed = this.allowed(router);
            return (ctx, next) => routes(ctx, () => allowed(ctx, next));
          }),
        );
      }
    }
    const dispatchers = this.dispatchers;
    const at = this.prefix.length;
    return (ctx, next) => {
      const path = ctx.path;
      const group = dispatchers.get(segmentAt(path, at))?.[depthAt(path, at)];
      return group === undefined ? next() : group(ctx, next);
    };
  }

  private groupOf(path: string): Router {
    if (this.dispatchers !== undefined) throw new Error(`route ${path} registered after the routes were dispatched`);
    const resource = segmentAt(path, 0);
    if (!RESOURCE.test(resource)) throw new Error(`route ${path}: its first segment must be a literal resource name`);
    const segments = path.slice(1).split("/");
    if (!segments.every((s) => SEGMENT.test(s))) throw new Error(`route ${path}: each segment must be a literal or a :name parameter`);
    let byDepth = this.groups.get(resource);
    if (byDepth === undefined) {
      byDepth = [];
      this.groups.set(resource, byDepth);
    }
    const depth = segments.length;
    let router = byDepth[depth];
    if (router === undefined) {
      router = this.make();
      byDepth[depth] = router;
    }
    return router;
  }
}
