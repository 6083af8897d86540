import { bodyParser } from "@koa/bodyparser";
import type { Context, Next } from "koa";
import { UnsupportedMediaTypeError, ValidationError } from "../../domain/errors.js";
import { exceedsDepth, MAX_JSON_DEPTH } from "../../domain/json-depth.js";

/** True when the request carries a body (a length above zero, or chunked). */
function hasBody(ctx: Context): boolean {
  const len = ctx.get("content-length");
  if (len !== "") return Number(len) > 0;
  return ctx.get("transfer-encoding") !== "";
}

/**
 * The common spellings of a JSON content type (`application/json`, `...+json`, with or without
 * parameters), recognised without type-is, which costs several microseconds per request. Anything
 * else is left to `ctx.is`, so this can only say yes where type-is would.
 */
export function isPlainJsonType(header: string): boolean {
  const semi = header.indexOf(";");
  const type = (semi === -1 ? header : header.slice(0, semi)).trim().toLowerCase();
  return type === "application/json" || PLUS_JSON.test(type);
}
const PLUS_JSON = /^application\/[a-z0-9][a-z0-9!#$&^_.-]{0,100}\+json$/;

/**
 * JSON bodies for the management API: a body that is not JSON is a 415, malformed JSON a 400,
 * and a body over the limit a 413 (the error middleware maps co-body's errors).
 */
export function jsonBody(limitBytes: number) {
  const parse = bodyParser({
    enableTypes: ["json"],
    jsonLimit: limitBytes,
    jsonStrict: true,
    encoding: "utf-8",
    // The parser's own type check (type-is) runs only when the fast check cannot say yes.
    detectJSON: (ctx) => isPlainJsonType(ctx.get("content-type")),
  });
  // Not async: what the parser returns goes to Koa as it is (a throw here becomes Koa's rejection),
  // no promise of this function's own per request.
  return function json(ctx: Context, next: Next): Promise<void> {
    if ((ctx.method === "POST" || ctx.method === "PUT" || ctx.method === "PATCH") && hasBody(ctx)) {
      if (!isPlainJsonType(ctx.get("content-type")) && !ctx.is("application/json", "+json")) {
        throw new UnsupportedMediaTypeError(
          `Content-Type must be application/json (got ${ctx.get("content-type").slice(0, 100) || "none"})`,
        );
      }
      // A declared length over the limit is refused before reading a byte.
      const declared = Number(ctx.get("content-length") || 0);
      if (declared > limitBytes) {
        const err = Object.assign(new Error("request entity too large"), { status: 413, type: "entity.too.large" });
        throw err;
      }
    }
    // Not async either: the parser awaits what this returns (a throw here rejects its promise).
    return parse(ctx, () => {
      if (exceedsDepth((ctx.request as { body?: unknown }).body)) {
        throw new ValidationError(`request body nests deeper than ${MAX_JSON_DEPTH} levels`, "invalid_body");
      }
      return next();
    });
  };
}
