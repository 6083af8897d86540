import type { RouteRegistrar } from "../route-groups.js";
import type { Queue } from "bullmq";
import { countReplayable, planReplay } from "../../delivery/bulk-replay.js";
import { replayDelivery } from "../../delivery/replay.js";
import { parseDeliverySelectors, parseDryRun, parseReplaySelectors } from "../../domain/delivery-query.js";
import { NotFoundError } from "../../domain/errors.js";
import { hasIdShape } from "../../domain/ids.js";
import { deliveryView, type AttemptLog } from "../../store/attempt-log.js";
import type { ReplayState, ReplayStore } from "../../store/replays.js";
import type { WebhookService } from "../../services/webhooks.js";
import { userIdOf } from "../middleware/auth.js";
import { pageRequest, params, sendData, sendPage } from "../params.js";

/** The API shape of a bulk replay (SPEC §12); `pending` = matched and neither settled nor skipped. */
function replayView(r: ReplayState, settled: { delivered: number; failed: number }) {
  const pending = Math.max(0, r.matched - settled.delivered - settled.failed - r.skipped);
  return {
    id: r.id,
    webhook_id: r.webhookId,
    state: r.cursor < r.matched ? "queueing" : pending > 0 ? "running" : "done",
    selectors: r.selectors,
    matched: r.matched,
    queued: r.queued,
    delivered: settled.delivered,
    failed: settled.failed,
    pending,
    skipped: r.skipped,
    created_at: r.createdAt,
    expires_at: r.expiresAt,
  };
}

/** The attempt log of a webhook, its queries, and replays of failed deliveries (SPEC §6, §12). */
export function deliveryRoutes(deps: { webhooks: WebhookService; log: AttemptLog; replays: ReplayStore; queue: Queue; attempts: number }) {
  return (router: RouteRegistrar): void => {
    router.get("/webhooks/:id/deliveries", async (ctx) => {
      const userId = userIdOf(ctx);
      const p = params(ctx);
      const selectors = parseDeliverySelectors(p);
      const page = pageRequest(ctx);
      const hook = await deps.webhooks.get(userId, ctx.params.id);
      const found = await deps.log.query(userId, hook.id, selectors, page);
      sendPage(ctx, { page_info: found.page_info, data: found.data.map(deliveryView) });
    });
    router.post("/webhooks/:id/deliveries/replay", async (ctx) => {
      const userId = userIdOf(ctx);
      const p = params(ctx);
      const selectors = parseReplaySelectors(p);
      const dryRun = parseDryRun(p.dry_run);
      const hook = await deps.webhooks.get(userId, ctx.params.id);
      if (dryRun) {
        sendData(ctx, { matched: await countReplayable(deps, userId, hook.id, selectors) });
        return;
      }
      sendData(ctx, await planReplay(deps, userId, hook.id, selectors), 202);
    });
    router.get("/webhooks/:id/replays/:replayId", async (ctx) => {
      const userId = userIdOf(ctx);
      const hook = await deps.webhooks.get(userId, ctx.params.id);
      const id = String(ctx.params.replayId);
      const r = hasIdShape(id, "rpl_") ? await deps.replays.get(userId, id) : undefined;
      if (!r || r.webhookId !== hook.id) throw new NotFoundError(`replay ${id.slice(0, 64)} not found`);
      sendData(ctx, replayView(r, await deps.replays.outcomes(userId, id)));
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
