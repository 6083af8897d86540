import { describe, expect, it } from "vitest";
import { IngressRate, type TokenBucket } from "../../../src/services/ingress-rate.js";

/** The port in memory: `waits` are the answers the bucket gives, in order (0 = taken). */
function bucket(waits: number[]): TokenBucket & { taken: [string, number][] } {
  const taken: [string, number][] = [];
  return {
    taken,
    async take(key, cost) {
      taken.push([key, cost]);
      return waits.shift() ?? 0;
    },
  };
}

describe("IngressRate", () => {
  const key = (userId: string) => `rate:${userId}`;

  it("admits what the user's bucket pays for, every event of a batch counted", async () => {
    const b = bucket([0]);
    await new IngressRate(b, key, { perSecond: 10, burst: 20 }).admit("u1", 5);
    expect(b.taken).toEqual([["rate:u1", 5]]);
  });

  it("answers 429 rate_limited with the bucket's wait as Retry-After (whole seconds, rounded up)", async () => {
    const rate = new IngressRate(bucket([1500]), key, { perSecond: 10, burst: 20 });
    await expect(rate.admit("u1", 1)).rejects.toMatchObject({ status: 429, code: "rate_limited", headers: { "retry-after": "2" } });
  });

  it("answers 413 to a batch larger than the burst, which could never pass, without taking tokens", async () => {
    const b = bucket([]);
    await expect(new IngressRate(b, key, { perSecond: 10, burst: 20 }).admit("u1", 21)).rejects.toMatchObject({ status: 413 });
    expect(b.taken).toEqual([]);
  });

  it("costs nothing when the rate is unlimited (0)", async () => {
    const b = bucket([]);
    await new IngressRate(b, key, { perSecond: 0, burst: 0 }).admit("u1", 1000);
    expect(b.taken).toEqual([]);
  });
});

describe("IngressRate.charge (taken by the record script in its own step)", () => {
  const key = (userId: string) => `rate:${userId}`;

  it("is every event of the request, against the user's bucket, with the rate and burst", () => {
    const rate = new IngressRate(bucket([]), key, { perSecond: 10, burst: 20 });
    expect(rate.charge("u1", 7)).toEqual({ key: "rate:u1", cost: 7, perSecond: 10, burst: 20 });
  });

  it("is nothing when the rate is unlimited, and a 413 for a batch larger than the burst", () => {
    expect(new IngressRate(bucket([]), key, { perSecond: 0, burst: 0 }).charge("u1", 500)).toBeUndefined();
    expect(() => new IngressRate(bucket([]), key, { perSecond: 10, burst: 20 }).charge("u1", 21)).toThrow(/burst of 20/);
  });

  it("turns the bucket's wait into the same 429 as admit", () => {
    expect(new IngressRate(bucket([]), key, { perSecond: 10, burst: 20 }).refused(2500)).toMatchObject({
      status: 429,
      code: "rate_limited",
      headers: { "retry-after": "3" },
    });
  });
});
