import { describe, expect, it } from "vitest";
import { compileHotRoute } from "../../src/api/app.js";

describe("compileHotRoute (the ingress path matched before the router)", () => {
  const route = compileHotRoute({ method: "POST", path: "/workflows/:id/events", handler: async () => {} });

  it("matches the exact spelling and captures the id", () => {
    expect(route.label).toBe("/v1/workflows/:id/events");
    expect(route.pattern.exec("/v1/workflows/p_abc-D_9/events")?.[1]).toBe("p_abc-D_9");
  });

  it.each([
    ["a trailing slash", "/v1/workflows/p_a/events/"],
    ["a percent-encoded id", "/v1/workflows/p_%41/events"],
    ["an id spanning segments", "/v1/workflows/p_a/b/events"],
    ["the $errors route", "/v1/workflows/p_a/$errors/events"],
    ["an empty id", "/v1/workflows//events"],
    ["a longer path", "/v1/workflows/p_a/events/x"],
  ])("leaves %s to the router", (_label, path) => {
    expect(route.pattern.test(path)).toBe(false);
  });

  it("refuses a template without exactly one :id", () => {
    expect(() => compileHotRoute({ method: "POST", path: "/workflows/events", handler: async () => {} })).toThrow(/one :id/);
  });
});
