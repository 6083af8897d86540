import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  ANSWER_EXCERPT_CHARS,
  type AttemptInput,
  classifyAttempt,
  describeAnswer,
  MAX_RETRY_AFTER_MS,
  parseRetryAfterMs,
} from "../../../src/domain/delivery-outcome.js";

const SCHEDULE = [1_000, 60_000, 600_000];
const NOW = Date.UTC(2024, 0, 1, 12, 0, 0);
/** random() = 0.5 means no jitter, so expected delays are the schedule's own values. */
const base = { attemptsMade: 1, scheduleMs: SCHEDULE, nowMs: NOW, random: () => 0.5 } satisfies AttemptInput;

describe("classifyAttempt", () => {
  it.each([200, 201, 204, 299])("treats %i as delivered", (statusCode) => {
    expect(classifyAttempt({ ...base, statusCode })).toEqual({ kind: "delivered" });
  });

  it("deactivates on 410 Gone, even on the last attempt", () => {
    expect(classifyAttempt({ ...base, statusCode: 410 })).toMatchObject({ kind: "deactivate" });
    expect(classifyAttempt({ ...base, statusCode: 410, attemptsMade: 4 })).toMatchObject({ kind: "deactivate" });
  });

  it.each([301, 302, 307, 308])("retries a %i, because redirects are not followed", (statusCode) => {
    const outcome = classifyAttempt({ ...base, statusCode });
    expect(outcome).toEqual({ kind: "retry", delayMs: 1_000, reason: `HTTP ${statusCode} (redirects are not followed)` });
  });

  it.each([400, 401, 404, 413, 500, 502, 504, 199, 600])("retries a %i on the schedule", (statusCode) => {
    expect(classifyAttempt({ ...base, statusCode, attemptsMade: 2 })).toEqual({
      kind: "retry",
      delayMs: 60_000,
      reason: `HTTP ${statusCode}`,
    });
  });

  it("retries time-outs, connection errors and other errors on the schedule", () => {
    expect(classifyAttempt({ ...base, errorKind: "timeout" })).toEqual({ kind: "retry", delayMs: 1_000, reason: "timed out" });
    expect(classifyAttempt({ ...base, errorKind: "connect" })).toEqual({ kind: "retry", delayMs: 1_000, reason: "connection failed" });
    expect(classifyAttempt({ ...base, errorKind: "other" })).toEqual({ kind: "retry", delayMs: 1_000, reason: "request failed" });
  });

  it("lets an error win over a status code", () => {
    expect(classifyAttempt({ ...base, statusCode: 200, errorKind: "timeout" })).toMatchObject({ kind: "retry" });
  });

  it("retries when neither a status nor an error was reported", () => {
    expect(classifyAttempt({ ...base })).toEqual({ kind: "retry", delayMs: 1_000, reason: "no response" });
  });

  it("gives up at once on a destination refused by the SSRF guard", () => {
    const outcome = classifyAttempt({ ...base, errorKind: "refused_destination" });
    expect(outcome.kind).toBe("give_up");
    expect(outcome).toHaveProperty("reason", expect.stringMatching(/destination refused.*ALLOW_PRIVATE_DESTINATIONS/));
  });

  it("gives up after the last attempt", () => {
    expect(classifyAttempt({ ...base, statusCode: 500, attemptsMade: 4 })).toEqual({
      kind: "give_up",
      reason: "HTTP 500; gave up after 4 attempts",
    });
    expect(classifyAttempt({ ...base, errorKind: "timeout", attemptsMade: 4 })).toMatchObject({ kind: "give_up" });
    expect(classifyAttempt({ ...base, statusCode: 302, scheduleMs: [] })).toMatchObject({ kind: "give_up" });
  });

  it("still delivers a 2xx on the last attempt", () => {
    expect(classifyAttempt({ ...base, statusCode: 200, attemptsMade: 4 })).toEqual({ kind: "delivered" });
  });

  describe("429 and 503", () => {
    it.each([429, 503])("waits for Retry-After seconds when longer than the schedule (%i)", (statusCode) => {
      expect(classifyAttempt({ ...base, statusCode, retryAfter: "120" })).toEqual({
        kind: "retry",
        delayMs: 120_000,
        reason: `HTTP ${statusCode}`,
      });
    });

    it("keeps the scheduled delay when Retry-After is shorter", () => {
      expect(classifyAttempt({ ...base, statusCode: 429, retryAfter: "0", attemptsMade: 2 })).toMatchObject({ delayMs: 60_000 });
    });

    it("reads an HTTP-date relative to the injected clock", () => {
      const at = new Date(NOW + 90_000).toUTCString();
      expect(classifyAttempt({ ...base, statusCode: 503, retryAfter: at })).toMatchObject({ kind: "retry", delayMs: 90_000 });
    });

    it("treats an HTTP-date in the past as no extra wait", () => {
      const at = new Date(NOW - 90_000).toUTCString();
      expect(classifyAttempt({ ...base, statusCode: 503, retryAfter: at })).toMatchObject({ delayMs: 1_000 });
    });

    it("caps Retry-After at one hour", () => {
      expect(classifyAttempt({ ...base, statusCode: 429, retryAfter: "86400" })).toMatchObject({ delayMs: MAX_RETRY_AFTER_MS });
    });

    it("never shortens a scheduled delay that is already over an hour", () => {
      const outcome = classifyAttempt({ ...base, statusCode: 429, retryAfter: "10", scheduleMs: [7_200_000] });
      expect(outcome).toMatchObject({ delayMs: 7_200_000 });
    });

    it("falls back to the schedule when Retry-After is absent or malformed", () => {
      expect(classifyAttempt({ ...base, statusCode: 429, retryAfter: null })).toMatchObject({ delayMs: 1_000 });
      expect(classifyAttempt({ ...base, statusCode: 429, retryAfter: "soon" })).toMatchObject({ delayMs: 1_000 });
      expect(classifyAttempt({ ...base, statusCode: 429, retryAfter: "-5" })).toMatchObject({ delayMs: 1_000 });
    });

    it("gives up when the schedule is exhausted, whatever Retry-After says", () => {
      expect(classifyAttempt({ ...base, statusCode: 429, retryAfter: "5", attemptsMade: 4 })).toEqual({
        kind: "give_up",
        reason: "HTTP 429; gave up after 4 attempts",
      });
    });
  });

  it("keeps every retry delay within ±20 % of the schedule, or within [scheduled, 1 h] for Retry-After (property)", () => {
    const statusOrError = fc.oneof(
      fc.record({ statusCode: fc.integer({ min: 100, max: 599 }) }),
      fc.record({ errorKind: fc.constantFrom("timeout" as const, "connect" as const, "other" as const) }),
    );
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 36_000_000 }), { minLength: 1, maxLength: 8 }),
        fc.integer({ min: 1, max: 10 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        statusOrError,
        fc.option(
          fc.oneof(
            fc.nat(200_000).map(String),
            fc.integer({ min: -7_200_000, max: 7_200_000 }).map((d) => new Date(NOW + d).toUTCString()),
          ),
        ),
        (scheduleMs, attemptsMade, r, result, retryAfter) => {
          const outcome = classifyAttempt({ ...result, retryAfter, attemptsMade, scheduleMs, nowMs: NOW, random: () => r });
          if (outcome.kind !== "retry") return;
          const scheduled = scheduleMs[attemptsMade - 1]!;
          const low = scheduled * 0.8;
          const high = scheduled * 1.2;
          const withinJitter = outcome.delayMs >= low && outcome.delayMs <= high;
          const withinRetryAfter = outcome.delayMs >= low && outcome.delayMs <= MAX_RETRY_AFTER_MS;
          expect(withinJitter || withinRetryAfter).toBe(true);
          const throttled = "statusCode" in result && (result.statusCode === 429 || result.statusCode === 503);
          if (!throttled) expect(withinJitter).toBe(true);
          else {
            const wanted = Math.min(parseRetryAfterMs(retryAfter, NOW) ?? 0, MAX_RETRY_AFTER_MS);
            expect(outcome.delayMs).toBeGreaterThanOrEqual(wanted);
          }
        },
      ),
    );
  });
});

describe("parseRetryAfterMs", () => {
  it("reads delta-seconds", () => {
    expect(parseRetryAfterMs("2", NOW)).toBe(2_000);
    expect(parseRetryAfterMs(" 30 ", NOW)).toBe(30_000);
  });

  it("reads IMF-fixdate HTTP-dates", () => {
    expect(parseRetryAfterMs("Mon, 01 Jan 2024 12:01:00 GMT", NOW)).toBe(60_000);
  });

  it("ignores absent and malformed values", () => {
    expect(parseRetryAfterMs(undefined, NOW)).toBeUndefined();
    expect(parseRetryAfterMs(null, NOW)).toBeUndefined();
    expect(parseRetryAfterMs("", NOW)).toBeUndefined();
    expect(parseRetryAfterMs("1.5", NOW)).toBeUndefined();
    expect(parseRetryAfterMs("2024-01-01", NOW)).toBeUndefined();
    expect(parseRetryAfterMs("not a date", NOW)).toBeUndefined();
  });
});

describe("describeAnswer (the attempt log's error for a failed answer)", () => {
  it("is the verdict alone for an empty or blank body", () => {
    expect(describeAnswer("HTTP 500", "")).toBe("HTTP 500");
    expect(describeAnswer("HTTP 500", " \r\n\t ")).toBe("HTTP 500");
  });

  it("adds the start of the body, control characters folded to spaces", () => {
    expect(describeAnswer("HTTP 503", '{"error":\n"down"}\r\n')).toBe('HTTP 503; response: {"error": "down"}');
  });

  it(`keeps at most ${ANSWER_EXCERPT_CHARS} characters of the body`, () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 2000 }), (body) => {
        const error = describeAnswer("HTTP 500", body);
        expect(error.startsWith("HTTP 500")).toBe(true);
        expect(error.length).toBeLessThanOrEqual("HTTP 500; response: ".length + ANSWER_EXCERPT_CHARS);
        expect(/[\u0000-\u001f\u007f]/.test(error)).toBe(false);
      }),
    );
  });
});

describe("receiver-driven control (webhook-delivery response header)", () => {
  it("deactivates on `disable` and gives up the message on `abort-message`, marked as the receiver's choice", () => {
    expect(classifyAttempt({ ...base, statusCode: 500, deliveryControl: "disable" })).toMatchObject({
      kind: "deactivate",
      reason: expect.stringMatching(/webhook-delivery: disable/),
      byReceiver: true,
    });
    expect(classifyAttempt({ ...base, statusCode: 429, deliveryControl: " Abort-Message " })).toMatchObject({
      kind: "give_up",
      reason: expect.stringMatching(/webhook-delivery: abort-message/),
      byReceiver: true,
    });
  });

  it("ignores the header on a 2xx, unknown values, and attempts without an answer", () => {
    expect(classifyAttempt({ ...base, statusCode: 200, deliveryControl: "disable" })).toEqual({ kind: "delivered" });
    expect(classifyAttempt({ ...base, statusCode: 500, deliveryControl: "pause" })).toMatchObject({ kind: "retry" });
    expect(classifyAttempt({ ...base, errorKind: "timeout", deliveryControl: "abort-message" })).toMatchObject({ kind: "retry" });
  });
});
