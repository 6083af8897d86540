import type { RouterMiddleware } from "@koa/router";
import type { RouteRegistrar } from "../route-groups.js";
import { CLOSED_CIRCUIT, rotationView, secretView, webhookView, type WebhookService } from "../../services/webhooks.js";
import { userIdOf } from "../middleware/auth.js";
import { noContent, pageRequest, params, sendData, sendPage } from "../params.js";

export function webhookRoutes(router: RouteRegistrar, webhooks: WebhookService): void {
  router.post("/webhooks", async (ctx) => {
    sendData(ctx, webhookView(await webhooks.create(userIdOf(ctx), params(ctx)), true, CLOSED_CIRCUIT));
  });
  const list: RouterMiddleware = async (ctx) => {
    const page = await webhooks.list(userIdOf(ctx), pageRequest(ctx));
    sendPage(ctx, { page_info: page.page_info, data: page.data.map((w) => webhookView(w, false)) });
  };
  router.get("/users/me/webhooks", list);
  // The collection's own path lists it too: where a newcomer looks after POST /webhooks.
  router.get("/webhooks", list);
  router.get("/webhooks/:id", async (ctx) => {
    const w = await webhooks.get(userIdOf(ctx), ctx.params.id);
    const [circuit, filtered] = await Promise.all([webhooks.circuit(w.user_id, w.id), webhooks.filtered(w.user_id, w.id)]);
    sendData(ctx, webhookView(w, true, circuit, filtered));
  });
  router.put("/webhooks/:id", async (ctx) => {
    const w = await webhooks.update(userIdOf(ctx), ctx.params.id, params(ctx));
    sendData(ctx, webhookView(w, true, await webhooks.circuit(w.user_id, w.id)));
  });
  // Secrets are not for shared caches or the browser's history.
  router.get("/webhooks/:id/secret", async (ctx) => {
    const w = await webhooks.get(userIdOf(ctx), ctx.params.id);
    ctx.set("cache-control", "no-store");
    sendData(ctx, secretView(w));
  });
  router.post("/webhooks/:id/secret/rotate", async (ctx) => {
    const w = await webhooks.rotateSecret(userIdOf(ctx), ctx.params.id, params(ctx));
    ctx.set("cache-control", "no-store");
    sendData(ctx, rotationView(w));
  });
  router.delete("/webhooks/:id", async (ctx) => {
    await webhooks.delete(userIdOf(ctx), ctx.params.id);
    noContent(ctx);
  });
}
