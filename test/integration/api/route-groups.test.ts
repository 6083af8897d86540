import type { AddressInfo } from "node:net";
import { Router } from "@koa/router";
import Koa, { type Middleware } from "koa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { depthAt, RouteGroups, segmentAt } from "../../../src/api/route-groups.js";

/**
 * The /v1 API is one router per resource and depth (src/api/route-groups.ts). These tests serve a small set
 * of groups over loopback HTTP and check that a request behaves as with one router: its route,
 * the routers' shared middleware, 405 with `Allow` from the group that holds the path, and an
 * unknown resource going on to the next middleware.
 */

describe("segmentAt", () => {
  it("reads the resource after the prefix", () => {
    expect(segmentAt("/v1/workflows/p_1/events", 3)).toBe("workflows");
    expect(segmentAt("/v1/users", 3)).toBe("users");
    expect(segmentAt("/v1/users/", 3)).toBe("users");
    expect(segmentAt("/workflows/:id/events", 0)).toBe("workflows");
  });
  it("answers empty when nothing or another prefix follows", () => {
    expect(segmentAt("/v1", 3)).toBe("");
    expect(segmentAt("/v1abc/users", 3)).toBe("");
    expect(segmentAt("/v1//users", 3)).toBe("");
  });
});

describe("depthAt", () => {
  it("counts the segments after the prefix, a trailing slash aside", () => {
    expect(depthAt("/v1/workflows/p_1/events", 3)).toBe(3);
    expect(depthAt("/v1/workflows/p_1/events/", 3)).toBe(3);
    expect(depthAt("/v1/users", 3)).toBe(1);
    expect(depthAt("/v1/users/", 3)).toBe(1);
    expect(depthAt("/workflows/:id/events", 0)).toBe(3);
    expect(depthAt("/v1/workflows/a%2Fb/events", 3)).toBe(3);
    expect(depthAt("/v1", 3)).toBe(0);
    expect(depthAt("/v1/", 3)).toBe(1);
  });
});

describe("RouteGroups over HTTP", () => {
  let server: ReturnType<Koa["listen"]>;
  let base = "";
  const made: string[] = [];
  /** Requests the shared middleware ran for. */
  const sharedRuns: string[] = [];
  let groups: RouteGroups;

  beforeAll(async () => {
    groups = new RouteGroups(
      "/v1",
      () => {
        made.push("router");
        return new Router({ prefix: "/v1", sensitive: true });
      },
      (r) => r.allowedMethods({ throw: false }) as unknown as Middleware,
      // The shared middleware every route runs first (the API's key check and body reader).
      [
        (ctx, next) => {
          sharedRuns.push(`${ctx.method} ${ctx.path}`);
          ctx.state.shared = true;
          return next();
        },
      ],
    );
    groups.get("/workflows/:id", (ctx) => {
      ctx.body = { route: "get workflow", id: ctx.params.id, shared: ctx.state.shared === true };
    });
    groups.post("/workflows/:id/events", (ctx) => {
      ctx.status = 202;
      ctx.body = { route: "emit", id: ctx.params.id };
    });
    groups.get("/workflows/:id/event_summaries", (ctx) => {
      ctx.body = { route: "summaries", id: ctx.params.id };
    });
    groups.put("/users/me", (ctx) => {
      ctx.body = { route: "put me" };
    });
    groups.delete("/users/me", (ctx) => {
      ctx.body = { route: "delete me" };
    });
    const app = new Koa();
    const dispatch = groups.dispatch();
    app.use((ctx, next) =>
      dispatch(ctx, () => {
        ctx.status = 404;
        ctx.body = { fellThrough: true };
        return next();
      }),
    );
    server = app.listen(0, "127.0.0.1");
    await new Promise((r) => server.once("listening", r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise((r) => server.close(r));
  });

  const call = async (method: string, path: string) => {
    const res = await fetch(base + path, { method });
    const text = await res.text();
    return { status: res.status, allow: res.headers.get("allow"), body: text ? JSON.parse(text) : undefined };
  };

  it("makes one router per resource and depth, holding only those routes", () => {
    expect(made).toHaveLength(3);
    expect(groups.routers().map((r) => r.stack.filter((l) => l.methods.length > 0).map((l) => l.path))).toEqual([
      ["/v1/workflows/:id"],
      ["/v1/workflows/:id/events", "/v1/workflows/:id/event_summaries"],
      ["/v1/users/me", "/v1/users/me"],
    ]);
  });

  it("routes a path with its trailing slash, and a parameter holding an encoded slash", async () => {
    expect(await call("POST", "/v1/workflows/p_3/events/")).toMatchObject({ status: 202, body: { route: "emit", id: "p_3" } });
    expect(await call("GET", "/v1/workflows/p_3/")).toMatchObject({ status: 200, body: { route: "get workflow", id: "p_3" } });
    expect(await call("GET", "/v1/workflows/a%2Fb/event_summaries")).toMatchObject({
      status: 200,
      body: { route: "summaries", id: "a/b" },
    });
  });

  it("answers 405 from the group of the path's depth, and hands a known resource at an unknown depth on", async () => {
    const r = await call("DELETE", "/v1/workflows/p_1/events");
    expect(r.status).toBe(405);
    expect(r.allow?.split(/,\s*/).sort()).toEqual(["POST"]);
    const w = await call("POST", "/v1/workflows/p_1");
    expect(w.status).toBe(405);
    expect(w.allow?.split(/,\s*/).sort()).toEqual(["GET", "HEAD"]);
    for (const path of ["/v1/workflows", "/v1/workflows/p_1/events/more", "/v1/workflows//events"]) {
      expect(await call("GET", path), path).toMatchObject({ status: 404 });
    }
  });

  it("runs the route of the path and method, after the shared middleware", async () => {
    expect(await call("GET", "/v1/workflows/p_1")).toMatchObject({ status: 200, body: { route: "get workflow", id: "p_1", shared: true } });
    expect(await call("POST", "/v1/workflows/p_2/events")).toMatchObject({ status: 202, body: { route: "emit", id: "p_2" } });
    expect(await call("DELETE", "/v1/users/me")).toMatchObject({ status: 200, body: { route: "delete me" } });
  });

  it("answers 405 with every method of the path in Allow", async () => {
    const r = await call("POST", "/v1/users/me");
    expect(r.status).toBe(405);
    expect(r.allow?.split(/,\s*/).sort()).toEqual(["DELETE", "PUT"]);
  });

  it("runs the shared middleware once per routed request, and never for a 404 or a 405", async () => {
    sharedRuns.length = 0;
    expect((await call("POST", "/v1/users/me")).status).toBe(405);
    expect((await call("GET", "/v1/workflows/p_1/nothing")).status).toBe(404);
    expect((await call("GET", "/v1/nothing/here")).status).toBe(404);
    expect(sharedRuns).toEqual([]);
    expect((await call("PUT", "/v1/users/me")).status).toBe(200);
    expect(sharedRuns).toEqual(["PUT /v1/users/me"]);
  });

  it("hands unknown resources, other spellings and other prefixes to the next middleware", async () => {
    for (const path of ["/v1/nothing/here", "/v1/Workflows/p_1", "/v1", "/v2/workflows/p_1", "/v1workflows/p_1"]) {
      expect(await call("GET", path), path).toMatchObject({ status: 404, body: { fellThrough: true } });
    }
  });

  it("refuses a route whose first segment is not a literal resource, and routes added after dispatch", () => {
    const g = new RouteGroups(
      "/v1",
      () => new Router({ prefix: "/v1" }),
      (r) => r.allowedMethods() as unknown as Middleware,
    );
    expect(() => g.get("/:resource/x", () => undefined)).toThrow(/literal resource name/);
    expect(() => g.get("/", () => undefined)).toThrow(/literal resource name/);
    expect(() => g.get("/a/(.*)", () => undefined)).toThrow(/literal or a :name parameter/);
    expect(() => g.get("/a/:id?", () => undefined)).toThrow(/literal or a :name parameter/);
    expect(() => g.get("/a/", () => undefined)).toThrow(/literal or a :name parameter/);
    g.get("/a", () => undefined);
    g.dispatch();
    expect(() => g.get("/b", () => undefined)).toThrow(/after the routes were dispatched/);
  });
});
