import type { RouteRegistrar } from "../route-groups.js";
import type { WorkflowService } from "../../services/workflows.js";
import { userIdOf } from "../middleware/auth.js";
import { noContent, pageRequest, params, sendData, sendPage } from "../params.js";

/** The workflow registry (SPEC §3). */
export function workflowRoutes(router: RouteRegistrar, workflows: WorkflowService): void {
  router.put("/workflows/:id", async (ctx) => {
    sendData(ctx, await workflows.upsert(userIdOf(ctx), ctx.params.id, params(ctx)));
  });
  router.get("/workflows/:id", async (ctx) => {
    sendData(ctx, await workflows.get(userIdOf(ctx), ctx.params.id));
  });
  router.delete("/workflows/:id", async (ctx) => {
    await workflows.delete(userIdOf(ctx), ctx.params.id);
    noContent(ctx);
  });
  router.get("/users/me/workflows", async (ctx) => {
    sendPage(ctx, await workflows.list(userIdOf(ctx), pageRequest(ctx)));
  });
}
