import { describe, expect, it } from "vitest";
import { ValidationError } from "../../../src/domain/errors.js";
import { isReservedHeader, parseWebhookSettings, retryScheduleMs, retrySpanProblem } from "../../../src/domain/webhook-settings.js";

describe("per-webhook settings (domain/webhook-settings.ts)", () => {
  it("reads only the settings given; null and empty text clear them", () => {
    expect(parseWebhookSettings({ name: "x" })).toEqual({});
    expect(parseWebhookSettings({ headers: null, timeout_ms: "", retry_schedule: null, rate_limit_per_second: "" })).toEqual({
      headers: null,
      timeout_ms: null,
      retry_schedule: null,
      rate_limit_per_second: null,
    });
  });

  it("takes query-string text and JSON values alike", () => {
    expect(
      parseWebhookSettings({ headers: '{"X-A":"1"}', timeout_ms: "100", retry_schedule: " 5s, 1m ", rate_limit_per_second: "7" }),
    ).toEqual({
      headers: { "x-a": "1" },
      timeout_ms: 100,
      retry_schedule: "5s,1m",
      rate_limit_per_second: 7,
    });
    expect(parseWebhookSettings({ headers: {}, timeout_ms: 60_000 })).toEqual({ headers: null, timeout_ms: 60_000 });
  });

  it("refuses the reserved header families, naming the header", () => {
    for (const name of [
      "webhook-id",
      "Webhook-Signature",
      "webhook-anything",
      "X-Tributary-Event-Id",
      "x-tributary-new",
      "Content-Type",
      "content-length",
      "HOST",
    ]) {
      expect(isReservedHeader(name)).toBe(true);
      expect(() => parseWebhookSettings({ headers: { [name]: "v" } })).toThrow(new RegExp(name));
    }
    for (const name of ["authorization", "x-webhook-id", "x-tributary", "hostname", "content-encoding"])
      expect(isReservedHeader(name)).toBe(false);
  });

  it("refuses the headers a delivery cannot carry (hop-by-hop, framing, Host, Expect) and User-Agent, saying why", () => {
    const transport = [
      "Transfer-Encoding",
      "upgrade",
      "Expect",
      "Keep-Alive",
      "Connection",
      "TE",
      "Trailer",
      "Proxy-Authorization",
      "proxy-connection",
      "proxy-anything",
      "HTTP2-Settings",
      "Host",
      "Content-Length",
    ];
    for (const name of transport) {
      expect(isReservedHeader(name), name).toBe(true);
      expect(() => parseWebhookSettings({ headers: { [name]: "v" } }), name).toThrow(
        new RegExp(`${name} cannot be set \\(a header of the HTTP connection`),
      );
    }
    expect(() => parseWebhookSettings({ headers: { "User-Agent": "mine/1" } })).toThrow(
      /User-Agent cannot be set \(every delivery sends User-Agent: Tributary-Webhooks\/1\)/,
    );
    for (const name of ["x-proxy", "expected", "teapot", "x-connection", "user-agents"]) expect(isReservedHeader(name), name).toBe(false);
  });

  it("refuses out-of-range and malformed values with a ValidationError naming the field", () => {
    const bad: [Record<string, unknown>, string][] = [
      [{ timeout_ms: 99 }, "timeout_ms"],
      [{ timeout_ms: 60_001 }, "timeout_ms"],
      [{ timeout_ms: true }, "timeout_ms"],
      [{ rate_limit_per_second: 0 }, "rate_limit_per_second"],
      [{ rate_limit_per_second: 10_001 }, "rate_limit_per_second"],
      [{ rate_limit_per_second: 2.5 }, "rate_limit_per_second"],
      [{ retry_schedule: "5x" }, "retry_schedule"],
      [{ retry_schedule: ["5s"] }, "retry_schedule"],
      [{ retry_schedule: Array(21).fill("1s").join(",") }, "retry_schedule"],
      [{ headers: { a: "1", A: "2" } }, "headers"],
      [{ headers: { a: "x".repeat(1001) } }, "headers"],
      [{ headers: Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`h${i}`, "v"])) }, "headers"],
    ];
    for (const [params, field] of bad) {
      let thrown: unknown;
      try {
        parseWebhookSettings(params);
      } catch (err) {
        thrown = err;
      }
      expect(thrown, JSON.stringify(params).slice(0, 80)).toBeInstanceOf(ValidationError);
      expect((thrown as Error).message).toContain(field);
    }
  });

  it("caps the span of a retry_schedule (MAX_RETRY_SPAN_HOURS), saying the cap in the message", () => {
    const twentyLong = Array(20).fill("1000h").join(",");
    expect(() => parseWebhookSettings({ retry_schedule: twentyLong })).toThrow(
      "retry_schedule is too long: its delays add up to 20000h, more than the 72h a failing delivery may be retried for (MAX_RETRY_SPAN_HOURS)",
    );
    expect(() => parseWebhookSettings({ retry_schedule: "1s" }, { maxRetrySpanHours: 1 })).not.toThrow();
    expect(() => parseWebhookSettings({ retry_schedule: "30m,30m,1s" }, { maxRetrySpanHours: 1 })).toThrow(
      /add up to 1h, more than the 1h/,
    );
    expect(parseWebhookSettings({ retry_schedule: "24h,24h,24h" })).toEqual({ retry_schedule: "24h,24h,24h" });
    expect(retrySpanProblem([5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000], 72)).toBeUndefined();
  });

  it("parses a stored schedule back to its delays", () => {
    expect(retryScheduleMs("100ms,2s,1m")).toEqual([100, 2000, 60_000]);
    expect(retryScheduleMs(null)).toBeUndefined();
    expect(retryScheduleMs(undefined)).toBeUndefined();
  });
});
