import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { maxAttempts, retryDelayMs } from "../../../src/domain/retry-policy.js";

const SCHEDULE = [5_000, 300_000, 1_800_000];
const middle = () => 0.5;

describe("retryDelayMs", () => {
  it("uses schedule[0] after the first attempt and the last delay after the last-but-one attempt", () => {
    expect(retryDelayMs(SCHEDULE, 1, middle)).toBe(5_000);
    expect(retryDelayMs(SCHEDULE, 2, middle)).toBe(300_000);
    expect(retryDelayMs(SCHEDULE, 3, middle)).toBe(1_800_000);
  });

  it("is exhausted once every scheduled delay was used", () => {
    expect(retryDelayMs(SCHEDULE, 4, middle)).toBeUndefined();
    expect(retryDelayMs(SCHEDULE, 50, middle)).toBeUndefined();
    expect(retryDelayMs([], 1, middle)).toBeUndefined();
  });

  it("applies jitter of up to 20 % either way", () => {
    expect(retryDelayMs([10_000], 1, () => 0)).toBe(8_000);
    expect(retryDelayMs([10_000], 1, () => 0.999_999_999)).toBe(12_000);
    expect(retryDelayMs([10_000], 1, () => 0.75)).toBe(11_000);
  });

  it("keeps a misbehaving random source inside the band", () => {
    expect(retryDelayMs([10_000], 1, () => -3)).toBe(8_000);
    expect(retryDelayMs([10_000], 1, () => 7)).toBe(12_000);
    expect(retryDelayMs([3], 1, () => 0)).toBe(3);
  });

  it("rejects an attempt count below 1", () => {
    expect(() => retryDelayMs(SCHEDULE, 0, middle)).toThrow(RangeError);
    expect(() => retryDelayMs(SCHEDULE, 1.5, middle)).toThrow(RangeError);
  });

  it("always stays within ±20 % of the scheduled delay (property)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 36_000_000 }), { minLength: 1, maxLength: 10 }),
        fc.nat(20),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (schedule, index, r) => {
          const attemptsMade = (index % schedule.length) + 1;
          const base = schedule[attemptsMade - 1]!;
          const delay = retryDelayMs(schedule, attemptsMade, () => r)!;
          expect(Number.isInteger(delay)).toBe(true);
          expect(delay).toBeGreaterThanOrEqual(base * 0.8);
          expect(delay).toBeLessThanOrEqual(base * 1.2);
        },
      ),
    );
  });
});

describe("maxAttempts", () => {
  it("is one more than the number of delays", () => {
    expect(maxAttempts(SCHEDULE)).toBe(4);
    expect(maxAttempts([5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000])).toBe(8);
    expect(maxAttempts([])).toBe(1);
  });
});
