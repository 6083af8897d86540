import type { RouteRegistrar } from "../route-groups.js";
import { sourceView, type SourceService } from "../../services/sources.js";
import { userIdOf } from "../middleware/auth.js";
import { noContent, pageRequest, params, sendData, sendPage } from "../params.js";

export function sourceRoutes(router: RouteRegistrar, sources: SourceService): void {
  router.get("/users/me/sources", async (ctx) => {
    const page = await sources.list(userIdOf(ctx), pageRequest(ctx));
    sendPage(ctx, { page_info: page.page_info, data: page.data.map((s) => sourceView(s, false)) });
  });
  router.post("/sources", async (ctx) => {
    sendData(ctx, sourceView(await sources.create(userIdOf(ctx), params(ctx)), true));
  });
  router.put("/sources/:id", async (ctx) => {
    sendData(ctx, sourceView(await sources.update(userIdOf(ctx), ctx.params.id, params(ctx)), true));
  });
  router.delete("/sources/:id", async (ctx) => {
    await sources.delete(userIdOf(ctx), ctx.params.id);
    noContent(ctx);
  });
}
