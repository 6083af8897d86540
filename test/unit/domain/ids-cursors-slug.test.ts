import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { decodeCursor, encodeCursor } from "../../../src/domain/cursors.js";
import { compareEventIds, hasIdShape, isEventId, isWorkflowId, newId, randomBase62 } from "../../../src/domain/ids.js";
import { pooledRandomBytes } from "../../../src/domain/random-pool.js";
import { slugify, uniqueSlug } from "../../../src/domain/slug.js";
import { randomBytes } from "node:crypto";

describe("ids", () => {
  it("prefixes random base62 of the requested length", () => {
    const id = newId("dc_", (n) => randomBytes(n));
    expect(id).toMatch(/^dc_[A-Za-z0-9]{16}$/);
    expect(hasIdShape(id, "dc_")).toBe(true);
  });
  it("is deterministic for a pinned random source", () => {
    const zeros = (n: number) => new Uint8Array(n);
    expect(randomBase62(4, zeros)).toBe("0000");
  });
  it("skips biased bytes so every character stays uniform", () => {
    const high = (n: number) => new Uint8Array(n).fill(250);
    let calls = 0;
    const mixed = (n: number) => (calls++ === 0 ? high(n) : new Uint8Array(n).fill(61));
    expect(randomBase62(3, mixed)).toBe("zzz");
  });
  it("maps each kept byte to its base62 character, after the prefix", () => {
    const counting = (n: number) => Uint8Array.from({ length: n }, (_, i) => i);
    expect(randomBase62(62, (n) => Uint8Array.from({ length: n }, (_, i) => i % 62))).toBe(
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    );
    expect(newId("emit_", counting)).toBe("emit_0123456789ABCDEF");
    expect(randomBase62(4, (n) => Uint8Array.from({ length: n }, (_, i) => [248, 62, 255, 247, 123, 63][i % 6] as number))).toBe("0zz1");
  });
  it("recognises workflow and event ids", () => {
    expect(isWorkflowId("p_abc-DEF_9")).toBe(true);
    expect(isWorkflowId("p_")).toBe(false);
    expect(isWorkflowId(`p_${"a".repeat(65)}`)).toBe(false);
    expect(isWorkflowId("p_*")).toBe(false);
    expect(isEventId("1700000000000-0")).toBe(true);
    expect(isEventId("1700000000000")).toBe(false);
    expect(hasIdShape("dc_*", "dc_")).toBe(false);
    expect(hasIdShape("wh_abc", "dc_")).toBe(false);
  });
});

describe("cursors", () => {
  it("are base64url of the id without padding", () => {
    expect(encodeCursor("dc_K0uAee")).toBe("ZGNfSzB1QWVl");
    expect(decodeCursor("ZGNfSzB1QWVl")).toBe("dc_K0uAee");
  });
  it("round-trip any id", () => {
    fc.assert(fc.property(fc.stringMatching(/^[a-z]{1,4}_[A-Za-z0-9]{1,30}$/), (id) => decodeCursor(encodeCursor(id)) === id));
  });
  it("reject garbage", () => {
    for (const bad of ["", "!!", "a b", "=", "%00", "x".repeat(300), "' OR 1=1 --"]) expect(decodeCursor(bad)).toBeUndefined();
  });
});

describe("slugs", () => {
  it("lowercases and collapses runs of other characters into one dash", () => {
    expect(slugify("My Fancy Source!")).toBe("my-fancy-source");
    expect(slugify("  --Conformance   Timer--  ")).toBe("conformance-timer");
    expect(slugify("ÜBER über")).toBe("ber-ber");
    expect(slugify("!!!")).toBe("source");
  });
  it("adds -2, -3 on collision", () => {
    const taken = new Set(["a", "a-2"]);
    expect(uniqueSlug("a", (s) => taken.has(s))).toBe("a-3");
    expect(uniqueSlug("b", (s) => taken.has(s))).toBe("b");
  });
  it("always produces [a-z0-9-] without leading or trailing dashes", () => {
    fc.assert(fc.property(fc.string(), (s) => /^[a-z0-9]+(-[a-z0-9]+)*$/.test(slugify(s))));
  });
});

describe("pooled random bytes", () => {
  /** A pool of 8-byte blocks whose n-th fill writes n into every byte, and its count of fills. */
  const countingPool = () => {
    let fills = 0;
    const take = pooledRandomBytes((buf) => {
      fills++;
      buf.fill(fills);
    }, 8);
    return { take, fills: () => fills };
  };
  it("hands out consecutive slices of one filled block, then refills", () => {
    const pool = countingPool();
    expect([...pool.take(3)]).toEqual([1, 1, 1]);
    expect([...pool.take(5)]).toEqual([1, 1, 1, 1, 1]);
    expect([...pool.take(2)]).toEqual([2, 2]);
    expect(pool.fills()).toBe(2);
  });
  it("never changes bytes it handed out: a refill takes a new block", () => {
    const pool = countingPool();
    const first = pool.take(6);
    pool.take(4);
    pool.take(4);
    expect(pool.fills()).toBe(2);
    expect([...first]).toEqual([1, 1, 1, 1, 1, 1]);
  });
  it("fills requests larger than a block directly", () => {
    const take = pooledRandomBytes((buf) => buf.fill(7), 4);
    expect(take(10)).toHaveLength(10);
  });
});

describe("compareEventIds", () => {
  it("orders stream ids by time, then sequence, as numbers (not as text)", () => {
    const sorted = ["0-0", "9-5", "10-0", "10-2", "10-10", "1700000000000-0", "1700000000000-1", "17000000000000-0"];
    for (let i = 0; i < sorted.length; i++) {
      for (let j = 0; j < sorted.length; j++) {
        expect(Math.sign(compareEventIds(sorted[i] as string, sorted[j] as string)), `${sorted[i]} vs ${sorted[j]}`).toBe(Math.sign(i - j));
      }
    }
  });

  it("treats leading zeros as the same number", () => {
    expect(compareEventIds("0010-01", "10-1")).toBe(0);
    expect(compareEventIds("0010-02", "10-1")).toBe(1);
  });
});
