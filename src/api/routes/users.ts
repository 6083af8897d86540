import type { RouteRegistrar } from "../route-groups.js";
import type { UserService } from "../../services/users.js";
import { UnauthorizedError } from "../../domain/errors.js";
import { userIdOf } from "../middleware/auth.js";
import { sendData } from "../params.js";

export function userRoutes(router: RouteRegistrar, users: UserService): void {
  router.get("/users/me", async (ctx) => {
    const user = await users.store.get(userIdOf(ctx));
    if (!user) throw new UnauthorizedError("invalid or revoked API key");
    sendData(ctx, await users.me(user));
  });
}
