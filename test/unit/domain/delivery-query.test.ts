import { describe, expect, it } from "vitest";
import {
  parseDeliverySelectors,
  parseDryRun,
  parseReplaySelectors,
  scoreRange,
  selectorsIdentity,
  selectsAnything,
} from "../../../src/domain/delivery-query.js";
import { normalizeChannel } from "../../../src/store/keys.js";

describe("attempt-log selectors", () => {
  it("reads status, since, until and event_name from strings or JSON values", () => {
    expect(parseDeliverySelectors({ status: "failed", since: "1700000000", until: 1700000600, event_name: "order.created" })).toEqual({
      status: "failed",
      since: 1_700_000_000,
      until: 1_700_000_600,
      event_name: "order.created",
    });
    expect(parseDeliverySelectors({})).toEqual({});
    expect(parseDeliverySelectors({ status: "", since: "", event_name: "" })).toEqual({ event_name: "" });
    expect(selectsAnything({})).toBe(false);
    expect(selectsAnything({ event_name: "" })).toBe(true);
  });

  it.each([
    [{ status: "done" }, /^status must be one of pending, delivered, failed/],
    [{ status: ["failed"] }, /^status/],
    [{ since: "yesterday" }, /^since must be a time in epoch seconds/],
    [{ since: -5 }, /^since/],
    [{ until: 1.5 }, /^until/],
    [{ until: "123456789012" }, /^until/],
    [{ since: 10, until: 10 }, /^since must be earlier than until/],
    [{ event_name: 5 }, /^event_name must be a string/],
    [{ event_name: "a\u0000b" }, /^event_name must not contain control characters/],
    [{ event_name: "x".repeat(201) }, /^event_name must be at most 200 characters/],
  ])("refuses %j with a 400 naming the parameter", (p, message) => {
    expect(() => parseDeliverySelectors(p)).toThrow(message);
    try {
      parseDeliverySelectors(p);
    } catch (err) {
      expect((err as { status?: number }).status).toBe(400);
    }
  });

  it("replays failed deliveries by default and refuses any other status", () => {
    expect(parseReplaySelectors({})).toEqual({ status: "failed" });
    expect(parseReplaySelectors({ status: "failed", event_name: "x" })).toEqual({ status: "failed", event_name: "x" });
    expect(() => parseReplaySelectors({ status: "delivered" })).toThrow(/status must be failed/);
    expect(() => parseReplaySelectors({ status: "pending" })).toThrow(/status must be failed/);
  });

  it("reads dry_run as a boolean", () => {
    expect(parseDryRun(undefined)).toBe(false);
    expect(parseDryRun("true")).toBe(true);
    expect(parseDryRun(true)).toBe(true);
    expect(parseDryRun("false")).toBe(false);
    expect(() => parseDryRun("yes")).toThrow(/dry_run must be true or false/);
    expect(() => parseDryRun(1)).toThrow(/dry_run/);
  });

  it("gives the same identity to the same selection however it is spelled, and different ones otherwise", () => {
    const id = (p: Record<string, unknown>) => selectorsIdentity(parseReplaySelectors(p), normalizeChannel);
    expect(id({})).toBe(id({ status: "failed" }));
    expect(id({ since: "100" })).toBe(id({ since: 100 }));
    expect(id({ event_name: "default" })).toBe(id({ event_name: "" }));
    expect(id({ since: 100 })).not.toBe(id({ until: 100 }));
    expect(id({})).not.toBe(id({ event_name: "" }));
  });

  it("maps since (inclusive) and until (exclusive) onto the log's event-id scores", () => {
    expect(scoreRange({})).toEqual({ max: "+inf", min: "-inf" });
    expect(scoreRange({ since: 1_700_000_000, until: 1_700_000_060 })).toEqual({
      min: "1700000000000000",
      max: "(1700000060000000",
    });
  });
});
