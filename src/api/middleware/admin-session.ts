import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import type { Context, Next } from "koa";
import { NotFoundError, UnauthorizedError } from "../../domain/errors.js";

/** The cookie a browser carries to the queue dashboard. */
export const ADMIN_SESSION_COOKIE = "tributary_admin";

const digest = (s: string): Buffer => createHash("sha256").update(s).digest();
/** Constant-time equality of two strings of any length (their digests are compared). */
const sameSecret = (a: string, b: Buffer): boolean => timingSafeEqual(digest(a), b);

function bearer(ctx: Context): string | undefined {
  return /^Bearer\s+(\S+)\s*$/i.exec(ctx.get("authorization"))?.[1];
}

/**
 * The admin guard of a browser page (the queue dashboard at `path`). A browser cannot send a
 * Bearer header, so besides `Authorization: Bearer <ADMIN_TOKEN>` it accepts the token once as
 * `?token=`: the answer is a 303 to the same URL without the token (out of the address bar and
 * history) that sets an HttpOnly, SameSite=Strict cookie scoped to `path` (Secure over HTTPS). The
 * cookie holds an HMAC of a fixed label under the token, never the token itself, so it stops
 * working when ADMIN_TOKEN changes. SameSite=Strict keeps other sites from riding on it (the
 * dashboard has buttons that change queues). Every comparison is constant-time.
 *
 * As the admin API: 404 when ADMIN_TOKEN is unset, 401 when no credential matches.
 */
export function requireAdminSession(adminToken: string | undefined, path: string) {
  const expected = adminToken ? digest(adminToken) : undefined;
  const session = adminToken ? createHmac("sha256", adminToken).update("tributary admin session v1").digest("base64url") : undefined;
  const sessionDigest = session ? digest(session) : undefined;
  return async function adminSession(ctx: Context, next: Next): Promise<void> {
    if (!expected || !session || !sessionDigest) throw new NotFoundError(`no route for ${ctx.method} ${ctx.path}`, "route_not_found");
    const header = bearer(ctx);
    if (header !== undefined) {
      if (!sameSecret(header, expected)) throw new UnauthorizedError("missing or invalid admin token");
      return next();
    }
    const raw = ctx.query.token;
    const token = Array.isArray(raw) ? raw[0] : raw;
    if (typeof token === "string" && token !== "") {
      if (!sameSecret(token, expected)) throw new UnauthorizedError("missing or invalid admin token");
      ctx.cookies.set(ADMIN_SESSION_COOKIE, session, { httpOnly: true, sameSite: "strict", path, secure: ctx.secure, overwrite: true });
      const rest = new URLSearchParams(ctx.querystring);
      rest.delete("token");
      const query = rest.toString();
      // One leading slash: `//admin/queues` would be a protocol-relative URL to another host.
      ctx.redirect(`${ctx.path.replace(/^\/+/, "/")}${query ? `?${query}` : ""}`);
      ctx.status = 303;
      return;
    }
    const cookie = ctx.cookies.get(ADMIN_SESSION_COOKIE);
    if (cookie !== undefined && sameSecret(cookie, sessionDigest)) return next();
    throw new UnauthorizedError("missing or invalid admin token (Bearer header, or ?token= once in a browser)");
  };
}
