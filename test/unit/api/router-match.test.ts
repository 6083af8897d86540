import { Router } from "@koa/router";
import { describe, expect, it } from "vitest";
import { literalPrefix, prefilterMatch } from "../../../src/api/router-match.js";

const noop = async () => {};

/** A router shaped like the app's /v1 one: router-level middleware, then many routes. */
function build(prefilter: boolean, sensitive = true): Router {
  const r = new Router({ prefix: "/v1", sensitive });
  if (prefilter) prefilterMatch(r);
  r.use(noop, noop);
  for (const s of ["sources", "webhooks", "workflows", "subscriptions"]) {
    r.get(`/${s}`, noop);
    r.post(`/${s}`, noop);
    r.get(`/${s}/:id`, noop);
    r.delete(`/${s}/:id`, noop);
    r.get(`/${s}/:id/event_summaries`, noop);
  }
  r.post("/workflows/:id/events", noop);
  r.get("/workflows/:id/$errors/event_summaries", noop);
  r.get("/users/me", noop);
  r.get(/^\/v1\/regex\/(\d+)$/, noop);
  return r;
}

const PATHS = [
  "/v1/workflows/p_x/events",
  "/v1/workflows/p_x/events/",
  "/v1/workflows/p_x/$errors/event_summaries",
  "/v1/workflows",
  "/v1/workflows/",
  "/v1/Workflows/p_x/events",
  "/v1/sources/dc_1",
  "/v1/users/me",
  "/v1/users/ME",
  "/v1/regex/12",
  "/v1",
  "/v1/",
  "/v2/workflows",
  "/",
  "/v1x/workflows",
];

const shape = (m: { path: { path: unknown }[]; pathAndMethod: { path: unknown }[]; route: boolean }) => ({
  path: m.path.map((l) => String(l.path)),
  pathAndMethod: m.pathAndMethod.map((l) => String(l.path)),
  route: m.route,
});

describe("api/router-match", () => {
  it("takes the literal start of a layer path", () => {
    expect(literalPrefix("/v1/workflows/:id/events")).toBe("/v1/workflows/");
    expect(literalPrefix("/v1(?:\\/|$)")).toBe("/v1");
    expect(literalPrefix("/v1/users/me")).toBe("/v1/users/me");
    expect(literalPrefix("/v1/workflows/:id/$errors/x")).toBe("/v1/workflows/");
    expect(literalPrefix(/^\/v1/)).toBe("");
  });

  for (const sensitive of [true, false]) {
    it(`matches exactly the layers @koa/router's own match does (sensitive ${sensitive})`, () => {
      const fast = build(true, sensitive);
      const plain = build(false, sensitive);
      let routes = 0;
      for (const path of PATHS) {
        for (const method of ["GET", "POST", "DELETE", "HEAD", "PATCH", "get"]) {
          const got = shape(fast.match(path, method));
          expect(got, `${method} ${path}`).toEqual(shape(plain.match(path, method)));
          if (got.route) routes++;
        }
      }
      expect(routes).toBeGreaterThan(10);
    });
  }
});
