import { describe, expect, it } from "vitest";
import { exceedsDepth, MAX_JSON_DEPTH } from "../../../src/domain/json-depth.js";

/** Nests `inner` in `levels` arrays or objects, alternating from `first`. */
function nest(levels: number, inner: unknown = 1, first: "array" | "object" = "array"): unknown {
  let v = inner;
  for (let i = 0; i < levels; i++) v = (i + (first === "array" ? 0 : 1)) % 2 === 0 ? [v] : { k: v };
  return v;
}

describe("exceedsDepth", () => {
  it("counts the value itself as level 1 and answers true only past the limit", () => {
    expect(exceedsDepth(nest(3), 3)).toBe(false);
    expect(exceedsDepth(nest(4), 3)).toBe(true);
    expect(exceedsDepth(nest(3, 1, "object"), 3)).toBe(false);
    expect(exceedsDepth(nest(4, 1, "object"), 3)).toBe(true);
    expect(exceedsDepth(nest(MAX_JSON_DEPTH))).toBe(false);
    expect(exceedsDepth(nest(MAX_JSON_DEPTH + 1))).toBe(true);
  });

  it("never counts scalars as a level", () => {
    for (const v of [null, 1, "x", true, undefined]) expect(exceedsDepth(v, 0)).toBe(false);
    expect(exceedsDepth({}, 0)).toBe(true);
    expect(exceedsDepth({ a: null, b: "s", c: [1, 2, 3] }, 2)).toBe(false);
    expect(exceedsDepth({ a: null, b: "s", c: [1, [2], 3] }, 2)).toBe(true);
  });

  it("finds the one deep branch among wide shallow ones, in objects and arrays", () => {
    const wide = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${i}`, { v: [i] }]));
    expect(exceedsDepth({ ...wide, last: nest(10) }, 10)).toBe(true);
    expect(exceedsDepth({ ...wide, last: nest(9) }, 10)).toBe(false);
    expect(exceedsDepth([...Object.values(wide), nest(10)], 10)).toBe(true);
  });

  it("stops on a cycle instead of overflowing the stack", () => {
    const a: Record<string, unknown> = {};
    a.self = a;
    expect(exceedsDepth(a)).toBe(true);
    expect(exceedsDepth(nest(100_000))).toBe(true);
  });
});
