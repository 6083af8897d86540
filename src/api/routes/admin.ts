import type { Router } from "@koa/router";
import { parseNewUser, type UserService } from "../../services/users.js";
import { params, noContent, sendData, sendList } from "../params.js";
import type { UserRecord } from "../../store/users.js";

const adminView = (u: UserRecord) => ({ id: u.id, username: u.username, email: u.email, plan: u.plan, created_at: u.created_at });

/**
 * Admin API (SPEC §4), mounted under /admin behind requireAdmin. The full API key is shown only
 * in the create and rotate answers.
 */
export function adminRoutes(router: Router, users: UserService, purgeUser: (id: string) => Promise<void>): void {
  router.post("/users", async (ctx) => {
    const { user, apiKey } = await users.store.create(parseNewUser(params(ctx)));
    sendData(ctx, { ...adminView(user), api_key: apiKey }, 201);
  });
  router.get("/users", async (ctx) => {
    sendList(ctx, (await users.store.list()).map(adminView));
  });
  router.delete("/users/:id", async (ctx) => {
    await users.store.require(String(ctx.params.id));
    await purgeUser(String(ctx.params.id));
    noContent(ctx);
  });
  router.post("/users/:id/api_key", async (ctx) => {
    const id = String(ctx.params.id);
    sendData(ctx, { id, api_key: await users.store.rotateKey(id) });
  });
}
