import { describe, expect, it } from "vitest";
import { PayloadTooLargeError, TooManyRequestsError } from "../../../src/domain/errors.js";
import {
  atLimit,
  componentBytesExceeded,
  ingressBatchTooLarge,
  ingressRateLimited,
  limitReached,
  limitsView,
  listenerLimitReached,
  storedBytesLimitReached,
  streamLimitReached,
  UNLIMITED,
} from "../../../src/domain/limits.js";

const used = {
  workflows: 1,
  sources: 2,
  components: 3,
  webhooks: 4,
  subscriptions: 5,
  auto_subscriptions: 6,
  component_bytes: 7,
  streams: 8,
  stored_bytes: 9,
};

describe("per-user limits (pure)", () => {
  it("treats 0 as unlimited", () => {
    expect(atLimit(1_000_000, 0)).toBe(false);
    expect(atLimit(2, 3)).toBe(false);
    expect(atLimit(3, 3)).toBe(true);
  });

  it("shows every limit with its usage, null for unlimited", () => {
    expect(limitsView(UNLIMITED, used)).toEqual({
      workflows: { limit: null, used: 1 },
      sources: { limit: null, used: 2 },
      components: { limit: null, used: 3 },
      webhooks: { limit: null, used: 4 },
      subscriptions: { limit: null, used: 5 },
      auto_subscriptions: { limit: null, used: 6 },
      component_bytes: { limit: null, used: 7 },
      streams: { limit: null, used: 8 },
      stored_bytes: { limit: null, used: 9 },
      listeners_per_emitter: { limit: null },
      ingress_events_per_second: { limit: null, burst: null },
    });
    const view = limitsView({ ...UNLIMITED, webhooks: 10, ingressEventsPerSecond: 5, ingressBurstEvents: 50 }, used);
    expect(view.webhooks).toEqual({ limit: 10, used: 4 });
    expect(view.ingress_events_per_second).toEqual({ limit: 5, burst: 50 });
  });

  it("names the limit, the usage and the way out in a 429 limit_exceeded with Retry-After", () => {
    const e = limitReached("auto_subscriptions", 100, 100);
    expect(e).toBeInstanceOf(TooManyRequestsError);
    expect(e.status).toBe(429);
    expect(e.code).toBe("limit_exceeded");
    expect(e.message).toBe(
      "auto_subscriptions limit reached: this user has 100 auto-subscriptions, at most 100 are allowed; delete some to make room (limits and usage: GET /v1/users/me)",
    );
    expect(Number(e.headers["retry-after"])).toBeGreaterThan(0);
    const streams = streamLimitReached(10, 10);
    expect([streams.status, streams.code]).toEqual([429, "limit_exceeded"]);
    expect(streams.message).toMatch(
      /^streams limit reached: this user has 10 event streams .*at most 10 are allowed; emit onto the names in use/,
    );
    const bytes = storedBytesLimitReached(90, 20, 100);
    expect([bytes.status, bytes.code]).toEqual([429, "limit_exceeded"]);
    expect(bytes.message).toMatch(
      /^stored_bytes limit reached: this user's event streams hold 90 bytes and these events need 20 more, at most 100/,
    );
    expect(listenerLimitReached("p_x", "", 3, 3).message).toMatch(
      /^listeners_per_emitter limit reached: an event of p_x on channel "default"/,
    );
  });

  it("answers 413 for what could never fit and 429 for what fits once room is made", () => {
    expect(componentBytesExceeded(0, 101, 100)).toBeInstanceOf(PayloadTooLargeError);
    const later = componentBytesExceeded(60, 50, 100);
    expect(later.status).toBe(429);
    expect(later.message).toMatch(/^component_bytes limit reached/);
    expect(ingressBatchTooLarge(1000, 500).status).toBe(413);
  });

  it("turns a bucket's wait into a whole-second Retry-After of at least 1", () => {
    expect(ingressRateLimited(1, 10, 20).headers["retry-after"]).toBe("1");
    expect(ingressRateLimited(2500, 10, 20).headers["retry-after"]).toBe("3");
    expect(ingressRateLimited(2500, 10, 20).code).toBe("rate_limited");
  });
});
