import { describe, expect, it } from "vitest";
import { channelLabel, methodLabel, statusClassLabel } from "../../../src/observability/metrics.js";

describe("metric labels", () => {
  it.each([
    [200, "2xx"],
    [204, "2xx"],
    [299, "2xx"],
    [301, "3xx"],
    [404, "4xx"],
    [418, "4xx"],
    [500, "5xx"],
    [599, "5xx"],
    [101, "1xx"],
    [0, "other"],
    [600, "other"],
    [99, "other"],
  ])("labels status %i as %s", (status, label) => {
    expect(statusClassLabel(status)).toBe(label);
  });

  it("gives every status from 0 to 999 one of six labels", () => {
    const labels = new Set(Array.from({ length: 1000 }, (_, s) => statusClassLabel(s)));
    expect([...labels].sort()).toEqual(["1xx", "2xx", "3xx", "4xx", "5xx", "other"]);
  });

  it("names the common methods and folds the rest", () => {
    for (const m of ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]) expect(methodLabel(m)).toBe(m);
    for (const m of ["PROPFIND", "MKCOL", "SEARCH", "get", "CONNECT"]) expect(methodLabel(m)).toBe("other");
  });

  it("keeps channel labels to four values", () => {
    expect(["", "default", "$errors", "$logs", "emoji😀", "x"].map(channelLabel)).toEqual([
      "default",
      "default",
      "$errors",
      "$logs",
      "custom",
      "custom",
    ]);
  });
});
