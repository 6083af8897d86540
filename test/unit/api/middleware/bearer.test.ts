import fc from "fast-check";
import type { Context } from "koa";
import { describe, expect, it } from "vitest";
import { bearer } from "../../../../src/api/middleware/auth.js";

/**
 * `bearer` (api/middleware/auth.ts) reads the usual `Bearer <token>` without its regular
 * expression; every header must get the answer the expression gives.
 */
const SPEC = /^Bearer\s+(\S+)\s*$/i;
const withHeader = (authorization: string | undefined) => ({ req: { headers: { authorization } } }) as unknown as Context;

describe("bearer", () => {
  it("reads the token of the usual spelling and of the others the scheme allows", () => {
    expect(bearer(withHeader("Bearer abc_DEF-123.xyz"))).toBe("abc_DEF-123.xyz");
    expect(bearer(withHeader("bearer abc"))).toBe("abc");
    expect(bearer(withHeader("BEARER \t abc  "))).toBe("abc");
    expect(bearer(withHeader("Bearer abc\u00a0"))).toBe("abc");
  });

  it("answers nothing without a token or with more than one word", () => {
    for (const h of [undefined, "", "Bearer", "Bearer ", "Bearer  ", "Basic abc", "Bearer a b", "Bearerabc", "Bearer a\u00a0b"]) {
      expect(bearer(withHeader(h)), JSON.stringify(h)).toBeUndefined();
    }
  });

  it("gives the regular expression's answer for any header", () => {
    const word = fc.string({ unit: fc.constantFrom("a", "Z", "0", "_", "-", " ", "\t", "\u00a0", "\u2028", "é", "\x7f", "~", "!") });
    const header = fc.oneof(
      word,
      word.map((w) => `Bearer ${w}`),
      word.map((w) => `bearer ${w}`),
      fc.string().map((w) => `Bearer ${w}`),
    );
    fc.assert(
      fc.property(header, (h) => {
        expect(bearer(withHeader(h))).toBe(SPEC.exec(h)?.[1]);
      }),
      { numRuns: 3000 },
    );
  });
});
