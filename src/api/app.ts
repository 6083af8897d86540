import { Router } from "@koa/router";
import Koa, { type Middleware } from "koa";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import type { ComponentService } from "../services/components.js";
import type { SourceService } from "../services/sources.js";
import type { SubscriptionService } from "../services/subscriptions.js";
import type { UserService } from "../services/users.js";
import type { WebhookService } from "../services/webhooks.js";
import type { WorkflowService } from "../services/workflows.js";
import { requireAdmin, requireUser } from "./middleware/auth.js";
import { jsonBody } from "./middleware/body.js";
import { errorHandler } from "./middleware/errors.js";
import { observeRequests } from "./middleware/observe.js";
import { adminRoutes } from "./routes/admin.js";
import { componentRoutes } from "./routes/components.js";
import { sourceRoutes } from "./routes/sources.js";
import { subscriptionRoutes } from "./routes/subscriptions.js";
import { userRoutes } from "./routes/users.js";
import { webhookRoutes } from "./routes/webhooks.js";
import { workflowRoutes } from "./routes/workflows.js";

/** Extra /v1 routes contributed by other features (events, ingress, deliveries). */
export type RouteModule = (router: Router) => void;

export interface ApiDeps {
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly adminToken: string | undefined;
  readonly bodyLimitBytes: number;
  readonly users: UserService;
  readonly components: ComponentService;
  readonly sources: SourceService;
  readonly subscriptions: SubscriptionService;
  readonly webhooks: WebhookService;
  readonly workflows: WorkflowService;
  /** Removes a user and all their data (admin DELETE). */
  readonly purgeUser: (userId: string) => Promise<void>;
  /** Readiness: Redis answers and this process's roles run. */
  readonly ready: () => Promise<boolean>;
  /** More authenticated /v1 routes (events, ingress, delivery log). */
  readonly v1Modules?: readonly RouteModule[];
  /** HTTP source endpoints under /e/ (raw bodies, no API key). */
  readonly endpoints?: Middleware;
}

/** The router answers 405 with the real `Allow` header; the error middleware adds the JSON body. */
const allowedMethods = (router: Router) => router.allowedMethods({ throw: false });

/** `%24errors` reaches the same route as `$errors`. */
const decodeDollar: Middleware = async (ctx, next) => {
  if (ctx.path.includes("%24")) ctx.path = ctx.path.replace(/%24/g, "$");
  await next();
};

/**
 * Builds the Koa application. Nothing listens here: `main.ts` calls `app.listen`, tests call
 * `app.callback()`.
 */
export function createApp(deps: ApiDeps): Koa {
  const app = new Koa({ proxy: true });
  app.silent = true;
  app.use(observeRequests(deps.metrics));
  app.use(errorHandler(deps.logger));
  app.use(decodeDollar);

  const ops = new Router();
  ops.get("/healthz", (ctx) => {
    ctx.body = { status: "ok" };
  });
  ops.get("/readyz", async (ctx) => {
    const ok = await deps.ready().catch(() => false);
    ctx.status = ok ? 200 : 503;
    ctx.body = ok ? { status: "ready" } : { error: "not ready", code: "not_ready" };
  });
  ops.get("/metrics", async (ctx) => {
    ctx.type = deps.metrics.registry.contentType;
    ctx.body = await deps.metrics.registry.metrics();
  });
  app.use(ops.routes());
  app.use(allowedMethods(ops));

  if (deps.endpoints) app.use(deps.endpoints);

  const admin = new Router({ prefix: "/admin" });
  admin.use(requireAdmin(deps.adminToken), jsonBody(deps.bodyLimitBytes));
  adminRoutes(admin, deps.users, deps.purgeUser);
  app.use(admin.routes());
  app.use(allowedMethods(admin));

  const v1 = new Router({ prefix: "/v1" });
  v1.use(requireUser(deps.users.store), jsonBody(deps.bodyLimitBytes));
  componentRoutes(v1, deps.components);
  sourceRoutes(v1, deps.sources);
  subscriptionRoutes(v1, deps.subscriptions);
  webhookRoutes(v1, deps.webhooks);
  userRoutes(v1, deps.users);
  workflowRoutes(v1, deps.workflows);
  for (const mod of deps.v1Modules ?? []) mod(v1);
  app.use(v1.routes());
  app.use(allowedMethods(v1));
  return app;
}
