import type { RouteRegistrar } from "../route-groups.js";
import { componentView, type ComponentService } from "../../services/components.js";
import { userIdOf } from "../middleware/auth.js";
import { params, sendData } from "../params.js";

export function componentRoutes(router: RouteRegistrar, components: ComponentService): void {
  router.post("/components", async (ctx) => {
    sendData(ctx, componentView(await components.create(userIdOf(ctx), params(ctx))));
  });
  router.get("/components/registry/:key", async (ctx) => {
    sendData(ctx, componentView(await components.getRegistry(String(ctx.params.key))));
  });
  router.get("/components/:keyOrId", async (ctx) => {
    sendData(ctx, componentView(await components.getByKeyOrId(userIdOf(ctx), String(ctx.params.keyOrId))));
  });
}
