import { validateHeaderValue } from "node:http";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { channelNameProblem, decodeEventNameHeader, eventNameHeader } from "../../../src/domain/channel-name.js";

describe("eventNameHeader", () => {
  it.each(["default", "$errors", "$logs", "order.created", "a/b:c", "p_*", "x".repeat(200), "!#$&'()*+,;=?@[]~"])(
    "sends the visible-ASCII name %s unchanged",
    (name) => {
      expect(eventNameHeader(name)).toBe(name);
    },
  );

  it("sends the default channel as default", () => {
    expect(eventNameHeader("")).toBe("default");
  });

  it.each([
    ["emoji😀", "emoji%F0%9F%98%80"],
    ["   ", "%20%20%20"],
    [" padded ", "%20padded%20"],
    ["a b", "a%20b"],
    ["100%", "100%25"],
    ["%20", "%2520"],
    ["é", "%C3%A9"],
    ["日本", "%E6%97%A5%E6%9C%AC"],
    ["tab\there", "tab%09here"],
    ["\u007f", "%7F"],
  ])("percent-encodes %j as %s", (name, header) => {
    expect(eventNameHeader(name)).toBe(header);
    expect(decodeEventNameHeader(header)).toBe(name);
  });

  it("sends an unpaired surrogate as U+FFFD rather than failing", () => {
    expect(eventNameHeader("a\uD800b")).toBe("a%EF%BF%BDb");
  });

  it("gives a valid header value that decodes to the name, for any name", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 200 }), (name) => {
        const header = eventNameHeader(name);
        expect(header).toMatch(/^[\u0021-\u007e]+$/);
        expect(() => validateHeaderValue("x-tributary-event-name", header)).not.toThrow();
        expect(decodeEventNameHeader(header)).toBe(name === "" ? "default" : name);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("channelNameProblem", () => {
  it.each(["", "default", "   ", "emoji😀", "x".repeat(200), "日本語"])("accepts %j", (name) => {
    expect(channelNameProblem(name)).toBeUndefined();
  });

  it.each([
    ["x".repeat(201), /at most 200/],
    ["a\nb", /control/],
    ["\u0000", /control/],
    ["\u007f", /control/],
    ["a\uD800", /surrogate/],
    ["\uDC00b", /surrogate/],
  ])("refuses %j", (name, problem) => {
    expect(channelNameProblem(name)).toMatch(problem);
  });
});
