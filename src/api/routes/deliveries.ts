import type { Router } from "@koa/router";
import type { Queue } from "bullmq";
import { deliveryView, type AttemptLog } from "../../store/attempt-log.js";
import { replayDelivery } from "../../delivery/replay.js";
import type { WebhookService } from "../../services/webhooks.js";
import { userIdOf } from "../middleware/auth.js";
import { pageRequest, sendPage } from "../params.js";

/** The attempt log of a webhook and replay of failed deliveries (SPEC §6). */
export function deliveryRoutes(deps: { webhooks: WebhookService; log: AttemptLog; queue: Queue; attempts: number }) {
  return (router: Router): void => {
    router.get("/webhooks/:id/deliveries", async (ctx) => {
      const userId = userIdOf(ctx);
      const hook = await deps.webhooks.get(userId, ctx.params.id);
      const page = await deps.log.list(userId, hook.id, pageRequest(ctx));
      sendPage(ctx, { page_info: page.page_info, data: page.data.map(deliveryView) });
    });
    router.post("/webhooks/:id/deliveries/:deliveryId/retry", async (ctx) => {
      const userId = userIdOf(ctx);
      const hook = await deps.webhooks.get(userId, ctx.params.id);
      await replayDelivery(deps.log, deps.queue, deps.attempts, userId, hook.id, String(ctx.params.deliveryId));
      ctx.body = { data: { id: ctx.params.deliveryId, status: "pending" } };
      ctx.status = 202;
    });
  };
}
