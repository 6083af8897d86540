import type { Context, Next } from "koa";
import { NotFoundError, UnauthorizedError } from "../../domain/errors.js";
import { timingSafeEqual, createHash } from "node:crypto";

export interface Authenticator {
  authenticate(apiKey: string): Promise<string | undefined>;
  /** The user of a key held in memory, answered without a promise (an emit's hot path); undefined: ask `authenticate`. */
  cached?(apiKey: string): string | undefined;
}

const BEARER = /^Bearer\s+(\S+)\s*$/i;

/**
 * The token of `Authorization: Bearer <token>` (the scheme in any case, whitespace around the
 * token). The usual spelling, `Bearer ` then printable ASCII without spaces, is read without the
 * regular expression and its match array (every request asks); anything else goes through it, so
 * both paths answer alike.
 */
export function bearer(ctx: Context): string | undefined {
  const header = ctx.req.headers.authorization ?? "";
  if (header.length > 7 && header.startsWith("Bearer ")) {
    let plain = true;
    for (let i = 7; i < header.length && plain; i++) {
      const c = header.charCodeAt(i);
      plain = c > 0x20 && c < 0x7f;
    }
    if (plain) return header.slice(7);
  }
  return BEARER.exec(header)?.[1];
}

/** Resolves `Authorization: Bearer <key>` to `ctx.state.userId`; 401 otherwise. */
export function requireUser(auth: Authenticator) {
  const admit = (ctx: Context, next: Next, userId: string | undefined): Promise<void> => {
    if (!userId) throw new UnauthorizedError("invalid or revoked API key");
    ctx.state.userId = userId;
    return next();
  };
  // Not an async function: a key held in memory goes on to `next` with no promise of its own
  // (Koa's dispatch turns a throw here into a rejection).
  return function authenticate(ctx: Context, next: Next): Promise<void> {
    const key = bearer(ctx);
    if (!key) throw new UnauthorizedError("missing Authorization: Bearer <API key> header");
    const held = auth.cached?.(key);
    if (held !== undefined) return admit(ctx, next, held);
    return auth.authenticate(key).then((userId) => admit(ctx, next, userId));
  };
}

const digest = (s: string) => createHash("sha256").update(s).digest();

/** The admin API: 404 when no ADMIN_TOKEN is configured, 401 on a wrong token (constant-time compare). */
export function requireAdmin(adminToken: string | undefined) {
  const expected = adminToken ? digest(adminToken) : undefined;
  return async function admin(ctx: Context, next: Next): Promise<void> {
    if (!expected) throw new NotFoundError(`no route for ${ctx.method} ${ctx.path}`, "route_not_found");
    const token = bearer(ctx);
    if (!token || !timingSafeEqual(digest(token), expected)) throw new UnauthorizedError("missing or invalid admin token");
    await next();
  };
}

export const userIdOf = (ctx: Context): string => {
  const id = ctx.state.userId;
  if (typeof id !== "string") throw new UnauthorizedError();
  return id;
};
