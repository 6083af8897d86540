import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import type { Context, Next } from "koa";
import { ForbiddenError, NotFoundError, UnauthorizedError } from "../../domain/errors.js";

/** The cookie a browser carries to the queue dashboard. */
export const ADMIN_SESSION_COOKIE = "tributary_admin";

const digest = (s: string): Buffer => createHash("sha256").update(s).digest();
/** Constant-time equality of two strings of any length (their digests are compared). */
const sameSecret = (a: string, b: Buffer): boolean => timingSafeEqual(digest(a), b);

/** What a browser tells about where a request comes from; "" for a header it did not send. */
export interface RequestSite {
  readonly method: string;
  /** `Sec-Fetch-Site`: same-origin, same-site, cross-site or none. */
  readonly fetchSite: string;
  /** `Origin`: sent by browsers on every request that is not GET or HEAD; "null" from an opaque origin. */
  readonly origin: string;
}

/** An origin in its serialized form (`http://host:port`, default port left out), or undefined. */
export function originOf(url: string): string | undefined {
  try {
    const origin = new URL(url).origin;
    return origin === "null" ? undefined : origin;
  } catch {
    return undefined;
  }
}

/**
 * Why a request carrying the dashboard's cookie may not change anything, or undefined when it may.
 * A cookie rides on every request the browser sends to the daemon's host: from a same-site page
 * (another port or a sibling subdomain: SameSite=Strict lets it through) a form or a no-cors fetch
 * POSTs with it, and the browser does not stop the request, only the reading of its answer. So a
 * call that is not GET or HEAD must come from the dashboard's own origin:
 * - `Sec-Fetch-Site: same-origin` (browsers send it to HTTPS and loopback URLs; JavaScript cannot
 *   set it), and any other value refuses;
 * - without it (plain HTTP to another host: browsers leave the Sec-Fetch headers out), an `Origin`
 *   that is one of `ownOrigins` (browsers send Origin on every such call; `null` from an opaque
 *   origin such as a sandboxed endpoint page);
 * - neither header: no browser sent it, and a script has the Bearer header for that.
 * GET and HEAD change nothing, and the same-origin policy keeps their answers from other origins.
 */
export function sessionRequestProblem(req: RequestSite, ownOrigins: readonly string[]): string | undefined {
  if (req.method === "GET" || req.method === "HEAD") return undefined;
  const why = "the dashboard's cookie changes queues only from the dashboard's own page; scripts use the Bearer header";
  if (req.fetchSite !== "") return req.fetchSite === "same-origin" ? undefined : `${why} (this request came from another site)`;
  if (req.origin === "") return `${why} (this request says neither Sec-Fetch-Site nor Origin)`;
  return ownOrigins.includes(req.origin) ? undefined : `${why} (this request came from another origin)`;
}

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
 * dashboard has buttons that change queues), but not same-site pages: a call with the cookie that
 * changes something must also come from the dashboard's origin (`sessionRequestProblem`; 403
 * otherwise). Every comparison is constant-time.
 *
 * As the admin API: 404 when ADMIN_TOKEN is unset, 401 when no credential matches.
 * `publicUrl` (PUBLIC_URL) names the origin the dashboard is served under, besides the request's
 * own (which a proxy that rewrites Host without X-Forwarded-Host would change).
 */
export function requireAdminSession(adminToken: string | undefined, path: string, publicUrl?: string) {
  const publicOrigin = publicUrl === undefined ? undefined : originOf(publicUrl);
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
    if (cookie !== undefined && sameSecret(cookie, sessionDigest)) {
      // The request's own origin as it reached the daemon (Koa's `ctx.origin` is the Origin header).
      const own = [originOf(`${ctx.protocol}://${ctx.host}`), publicOrigin].filter((o): o is string => o !== undefined);
      const problem = sessionRequestProblem({ method: ctx.method, fetchSite: ctx.get("sec-fetch-site"), origin: ctx.get("origin") }, own);
      if (problem) throw new ForbiddenError(problem, "cross_origin_request");
      return next();
    }
    throw new UnauthorizedError("missing or invalid admin token (Bearer header, or ?token= once in a browser)");
  };
}
