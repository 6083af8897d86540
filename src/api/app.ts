import { Router } from "@koa/router";
import Koa, { type Middleware } from "koa";
import { ENDPOINT_ANSWER_HEADERS } from "../domain/custom-response.js";
import { isUnderPrefix } from "../domain/path-prefix.js";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import type { ComponentService } from "../services/components.js";
import type { SourceService } from "../services/sources.js";
import type { SubscriptionService } from "../services/subscriptions.js";
import type { UserService } from "../services/users.js";
import type { WebhookService } from "../services/webhooks.js";
import type { WorkflowService } from "../services/workflows.js";
import { requireAdminSession } from "./middleware/admin-session.js";
import { type Authenticator, requireAdmin, requireUser } from "./middleware/auth.js";
import { jsonBody } from "./middleware/body.js";
import { errorAnswers } from "./middleware/errors.js";
import { requestRecorder } from "./middleware/observe.js";
import { buildOpenApiDocument } from "./openapi/document.js";
import { OPS_PATHS, opsAnswer } from "./ops-answers.js";
import { QUEUE_BOARD_PATH, type QueueBoard } from "./queue-board.js";
import { RouteGroups, type RouteRegistrar } from "./route-groups.js";
import { adminRoutes } from "./routes/admin.js";
import { componentRoutes } from "./routes/components.js";
import { docsRoutes, OPENAPI_PATH } from "./routes/docs.js";
import { homeRoutes } from "./routes/home.js";
import { sourceRoutes } from "./routes/sources.js";
import { subscriptionRoutes } from "./routes/subscriptions.js";
import { userRoutes } from "./routes/users.js";
import { isLiveTailPath } from "./routes/live-tail.js";
import { webhookRoutes } from "./routes/webhooks.js";
import { workflowRoutes } from "./routes/workflows.js";

/** Extra /v1 routes contributed by other features (events, ingress, deliveries). */
export type RouteModule = (router: RouteRegistrar) => void;

export interface ApiDeps {
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly adminToken: string | undefined;
  /** PUBLIC_URL: the origin the queue dashboard is served under (its guard's same-origin check). */
  readonly publicUrl?: string;
  readonly bodyLimitBytes: number;
  readonly users: UserService;
  /** Resolves API keys; default the user store (one Redis read per request). */
  readonly authenticator?: Authenticator;
  readonly components: ComponentService;
  readonly sources: SourceService;
  readonly subscriptions: SubscriptionService;
  readonly webhooks: WebhookService;
  readonly workflows: WorkflowService;
  /** Removes a user and all their data (admin DELETE). */
  readonly purgeUser: (userId: string) => Promise<void>;
  /**
   * Readiness: Redis answers and this process's roles run. Bounded by its maker
   * (app/readiness.ts `processReadiness`): it never throws and answers false within 1.5 s even
   * while Redis stalls, so /readyz needs no deadline of its own.
   */
  readonly ready: () => Promise<boolean>;
  /** More authenticated /v1 routes (events, ingress, delivery log). */
  readonly v1Modules?: readonly RouteModule[];
  /** HTTP source endpoints under /e/ (raw bodies, no API key). */
  readonly endpoints?: Middleware;
  /**
   * REDIS_MIN_REPLICAS_ACK: waits until a 2xx's writes are on enough replicas (api/middleware/replicated.ts);
   * unset = answers go out as soon as the handler is done.
   */
  readonly acknowledgeWrites?: Middleware;
  /** The live tail's stream routes (`…/sse`, `/sse/…`), which authenticate by themselves (api/routes/live-tail.ts). */
  readonly liveTail?: { readonly streams: Middleware; readonly router: Router };
  /** The queue dashboard (api/queue-board.ts), served at /admin/queues behind the admin guard. */
  readonly queueBoard?: QueueBoard;
  /** The daemon's version, shown in the OpenAPI document. */
  readonly version?: string;
}

/** One route the app serves: a method and an OpenAPI path template (`/v1/sources/{id}`). */
export interface RouteEntry {
  readonly method: string;
  readonly path: string;
}

const routeTables = new WeakMap<Koa, readonly RouteEntry[]>();

/**
 * Every route+method an app built by `createApp` serves: its routers' layers, plus the
 * middleware mounted under a path (source endpoints, queue dashboard), declared where they are
 * mounted. HEAD is left out (every GET answers it). The OpenAPI tests compare this with the document.
 */
export function routeTable(app: Koa): readonly RouteEntry[] {
  return routeTables.get(app) ?? [];
}

/** The layers of routers as entries, `:name` written `{name}`. */
function layersOf(routers: readonly Router[]): RouteEntry[] {
  return routers.flatMap((r) =>
    r.stack.flatMap((layer) =>
      layer.methods.filter((m) => m !== "HEAD").map((method) => ({ method, path: String(layer.path).replace(/:(\w+)/g, "{$1}") })),
    ),
  );
}

/** What a mounted middleware answers: every listed method on its path and any sub-path. */
function mounted(path: string, methods: readonly string[], sub: string): RouteEntry[] {
  return [path, `${path}/{${sub}}`].flatMap((p) => methods.map((method) => ({ method, path: p })));
}

/** The router answers 405 with the real `Allow` header; the error middleware adds the JSON body. */
const allowedMethods = (router: Router) => router.allowedMethods({ throw: false });

/**
 * `%24errors` reaches the same route as `$errors`: decodes the path, then runs `mw`. A plain
 * function around the dispatch rather than a Koa layer of its own (one promise less per request).
 */
const decodeDollar =
  (mw: Middleware): Middleware =>
  (ctx, next) => {
    if (ctx.path.includes("%24")) ctx.path = ctx.path.replace(/%24/g, "$");
    return mw(ctx, next);
  };

/**
 * Every router matches case-sensitively. A router's `use()` guards are matched by their own
 * case-sensitive pattern, so a router whose routes matched case-insensitively served `/ADMIN/users`
 * without running its admin-token guard (and `/V1/...` without the API-key check).
 */
function router(prefix?: string): Router {
  return new Router(prefix === undefined ? { sensitive: true } : { prefix, sensitive: true });
}

/** `/v1…` (the /v1 router is case-sensitive). */
function isV1Path(path: string): boolean {
  return path.length >= 3 && path.charCodeAt(0) === 47 && path.charCodeAt(1) === 118 && path.charCodeAt(2) === 49;
}

/**
 * A request's debug line. An HTTP source endpoint's path is its secret token: the line names the
 * route instead.
 */
function logRequest(logger: Logger, ctx: Koa.Context, startedMs: number): void {
  const path = ctx.path.startsWith("/e/") ? "/e/{token}" : ctx.path;
  logger.debug(
    { method: ctx.method, path, status: ctx.status, ms: Math.round(performance.now() - startedMs) },
    `${ctx.method} ${path} ${ctx.status}`,
  );
}

/**
 * The one Koa layer every app has: metrics around the error answers around (write acknowledgement
 * and) routing, in that order, in one async function (the two used to be an async layer each: two
 * promises more).
 */
function outermost(deps: Pick<ApiDeps, "logger" | "metrics" | "acknowledgeWrites">, route: Middleware): Middleware {
  const record = requestRecorder(deps.metrics);
  const answers = errorAnswers(deps.logger);
  const acknowledge = deps.acknowledgeWrites;
  // Read once: the per-request line costs nothing unless the process logs at debug.
  const logRequests = deps.logger.isLevelEnabled("debug");
  const inner: Middleware = acknowledge ? (ctx, next) => acknowledge(ctx, () => route(ctx, next)) : route;
  return async (ctx, next) => {
    const started = performance.now();
    try {
      await inner(ctx, next);
      answers.unanswered(ctx);
    } catch (err) {
      answers.failed(ctx, err);
    } finally {
      record(ctx, started);
      if (logRequests) logRequest(deps.logger, ctx, started);
    }
  };
}

/** The methods the OpenAPI document lists for endpoints (any method reaches them). */
const ENDPOINT_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] as const;

/**
 * The app of the endpoints' own listener (ENDPOINT_PORT): HTTP source endpoints and nothing else,
 * so a page served there shares its origin with no other page of the daemon. Every answer, the 404
 * of any other path included, carries the endpoint answer headers.
 */
export function createEndpointApp(deps: Pick<ApiDeps, "logger" | "metrics" | "acknowledgeWrites"> & { endpoints: Middleware }): Koa {
  const app = new Koa({ proxy: true });
  app.silent = true;
  const endpoints = deps.endpoints;
  app.use(
    outermost(deps, (ctx, next) => {
      ctx.set(ENDPOINT_ANSWER_HEADERS);
      return endpoints(ctx, next);
    }),
  );
  routeTables.set(app, mounted("/e/{token}", ENDPOINT_METHODS, "path"));
  return app;
}

/**
 * Builds the Koa application. Nothing listens here: `main.ts` calls `app.listen`, tests call
 * `app.callback()`.
 */
export function createApp(deps: ApiDeps): Koa {
  const app = new Koa({ proxy: true });
  app.silent = true;

  const ops = router();
  const opsSources = { registry: deps.metrics.registry, ready: deps.ready };
  for (const path of OPS_PATHS) {
    ops.get(path, async (ctx) => {
      const answer = await opsAnswer(path, opsSources);
      ctx.status = answer.status;
      ctx.type = answer.contentType;
      ctx.body = answer.body;
    });
  }
  // The API document and its reference page need no key (SPEC §10).
  docsRoutes(ops, { document: buildOpenApiDocument({ version: deps.version ?? "0.0.0" }) });
  homeRoutes(ops, { version: deps.version ?? "0.0.0" });
  const opsRoutes = ops.routes() as unknown as Middleware;
  const opsAllowed = allowedMethods(ops) as unknown as Middleware;

  const guardAdmin = requireAdmin(deps.adminToken);
  const admin = router("/admin");
  // The router-level guard stays as a second line; the first is `adminGroup` below.
  admin.use(guardAdmin, jsonBody(deps.bodyLimitBytes));
  adminRoutes(admin, deps.users, deps.purgeUser);
  const adminRoutesMw = admin.routes() as unknown as Middleware;
  const adminAllowed = allowedMethods(admin) as unknown as Middleware;
  // Every spelling of /admin (any case, percent-encoded letters) meets the token check before
  // any router matching: 404 when ADMIN_TOKEN is unset, 401 without the token, and only then
  // the (case-sensitive) router, for which other spellings are unknown routes.
  const adminChain: Middleware = (ctx, next) => adminRoutesMw(ctx, () => adminAllowed(ctx, next));
  // The queue dashboard is for browsers: its guard also takes the token once as ?token= and then
  // a cookie (middleware/admin-session.ts); same 404/401 rules.
  const board = deps.queueBoard;
  const guardBoard = requireAdminSession(deps.adminToken, QUEUE_BOARD_PATH, deps.publicUrl);
  const adminGroup: Middleware = (ctx, next) => {
    if (!isUnderPrefix(ctx.path, "/admin")) return next();
    if (board && isUnderPrefix(ctx.path, QUEUE_BOARD_PATH)) {
      return guardBoard(ctx, () => board.middleware(ctx, () => adminChain(ctx, next)));
    }
    return guardAdmin(ctx, () => adminChain(ctx, next));
  };

  const user = requireUser(deps.authenticator ?? deps.users.store);
  const body = jsonBody(deps.bodyLimitBytes);
  // One router per resource and depth (route-groups.ts); every route checks the API key and reads JSON bodies first.
  const v1 = new RouteGroups(
    "/v1",
    () => router("/v1"),
    (r) => allowedMethods(r) as unknown as Middleware,
    [user, body],
  );
  componentRoutes(v1, deps.components);
  sourceRoutes(v1, deps.sources);
  subscriptionRoutes(v1, deps.subscriptions);
  webhookRoutes(v1, deps.webhooks);
  userRoutes(v1, deps.users);
  workflowRoutes(v1, deps.workflows);
  for (const mod of deps.v1Modules ?? []) mod(v1);
  const v1Routes = v1.dispatch();

  const endpoints = deps.endpoints;
  // Dispatch by path prefix, so /v1 requests skip the ops, endpoint and admin middleware. Only
  // paths starting with /v1 can match the /v1 router, and none of those can match the others.
  const liveTail = deps.liveTail;
  const dispatch: Middleware = (ctx, next) => {
    if (isV1Path(ctx.path) && ctx.path !== OPENAPI_PATH) return v1Routes(ctx, next);
    return opsRoutes(ctx, () =>
      opsAllowed(ctx, async () => {
        if (endpoints) await endpoints(ctx, () => adminGroup(ctx, next));
        else await adminGroup(ctx, next);
      }),
    );
  };
  // Stream paths meet the live-tail router first (its own auth: API key or browser token); what it
  // does not answer goes on to the usual dispatch.
  const streams = liveTail?.streams;
  const route = decodeDollar(
    streams ? (ctx, next) => (isLiveTailPath(ctx.path) ? streams(ctx, () => dispatch(ctx, next)) : dispatch(ctx, next)) : dispatch,
  );
  app.use(outermost(deps, route));
  routeTables.set(app, [
    ...layersOf([ops, admin, ...v1.routers(), ...(liveTail ? [liveTail.router] : [])]),
    ...(endpoints ? mounted("/e/{token}", ENDPOINT_METHODS, "path") : []),
    // The dashboard's page is GET /admin/queues; everything else of it lies below.
    ...(board ? mounted(QUEUE_BOARD_PATH, board.methods, "path").filter((r) => r.method === "GET" || r.path !== QUEUE_BOARD_PATH) : []),
  ]);
  return app;
}
