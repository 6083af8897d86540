import type { RouteRegistrar } from "../route-groups.js";
import type { SubscriptionService } from "../../services/subscriptions.js";
import { userIdOf } from "../middleware/auth.js";
import { noContent, params, sendData, sendList } from "../params.js";

export function subscriptionRoutes(router: RouteRegistrar, subscriptions: SubscriptionService): void {
  router.post("/subscriptions", async (ctx) => {
    sendData(ctx, await subscriptions.create(userIdOf(ctx), params(ctx)));
  });
  router.delete("/subscriptions", async (ctx) => {
    await subscriptions.delete(userIdOf(ctx), params(ctx));
    noContent(ctx);
  });
  router.get("/users/me/subscriptions", async (ctx) => {
    sendList(ctx, await subscriptions.list(userIdOf(ctx)));
  });
  router.post("/auto_subscriptions", async (ctx) => {
    sendData(ctx, await subscriptions.createAuto(userIdOf(ctx), params(ctx)));
  });
}
