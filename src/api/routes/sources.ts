import type { RouterMiddleware } from "@koa/router";
import type { RouteRegistrar } from "../route-groups.js";
import { sourceView, type SourceService } from "../../services/sources.js";
import { userIdOf } from "../middleware/auth.js";
import { noContent, pageRequest, params, sendData, sendPage } from "../params.js";

export function sourceRoutes(router: RouteRegistrar, sources: SourceService): void {
  const list: RouterMiddleware = async (ctx) => {
    const page = await sources.list(userIdOf(ctx), pageRequest(ctx));
    sendPage(ctx, { page_info: page.page_info, data: page.data.map((s) => sourceView(s, false)) });
  };
  router.get("/users/me/sources", list);
  // The collection's own path lists it too: where a newcomer looks after POST /sources.
  router.get("/sources", list);
  router.get("/sources/:id", async (ctx) => {
    sendData(ctx, sourceView(await sources.get(userIdOf(ctx), ctx.params.id), true));
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
