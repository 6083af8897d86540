import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HOME_CSP } from "../../../src/api/routes/home.js";
import { client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { absentId, createComponent, createSource, createWebhook, expectError, expectStatus, HTTP_ESM } from "./support.js";

/** Where a newcomer looks: GET / links the rest; the collections answer GET; a source can be read alone. */

let td: TestDaemon;

beforeAll(async () => {
  td = await startTestDaemon({ ALLOW_PRIVATE_DESTINATIONS: "true" });
});

afterAll(async () => {
  await td?.close();
});

describe("GET /", () => {
  it("answers a static page linking the reference and the health endpoints, under a CSP that lets nothing run or load", async () => {
    const res = await client(td.url).get("/");
    expectStatus(res, 200);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(res.headers.get("content-security-policy")).toBe(HOME_CSP);
    expect(HOME_CSP).toContain("default-src 'none'");
    for (const href of ["/docs", "/v1/openapi.json", "/healthz", "/readyz", "/metrics"]) expect(res.text).toContain(`href="${href}"`);
    expect(res.text).not.toMatch(/<script|<style|style=|src=|https?:\/\//i);
    // Every link it shows answers.
    for (const [, href] of res.text.matchAll(/href="([^"]+)"/g)) {
      const linked = await fetch(new URL(href as string, td.url));
      expect([200, 503], href).toContain(linked.status);
    }
  });
});

describe("GET /v1/sources, /v1/webhooks", () => {
  it("list the user's own sources and webhooks, as /v1/users/me/... do, page by page", async () => {
    const u = await td.createUser();
    const other = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    for (let i = 0; i < 3; i++) await createSource(u.api, { component_id: c.id, name: `s${i}` });
    for (let i = 0; i < 3; i++) await createWebhook(u.api, `http://127.0.0.1:9/hook${i}`);
    await createWebhook(other.api, "http://127.0.0.1:9/other");
    for (const [short, long] of [
      ["/v1/sources", "/v1/users/me/sources"],
      ["/v1/webhooks", "/v1/users/me/webhooks"],
    ] as const) {
      const first = await u.api.get(short, { query: { limit: 2 } });
      expectStatus(first, 200);
      expect(first.body.data).toHaveLength(2);
      expect(first.body).toEqual((await u.api.get(long, { query: { limit: 2 } })).body);
      const after = first.body.page_info.end_cursor;
      const second = await u.api.get(short, { query: { limit: 2, after } });
      expect(second.body).toEqual((await u.api.get(long, { query: { limit: 2, after } })).body);
      expect(second.body.data).toHaveLength(1);
      expect(first.body.page_info.total_count).toBe(3);
      expectError(await u.api.get(short, { query: { limit: "many" } }), 400);
      expectError(await client(td.url).get(short), 401);
    }
  });
});

describe("GET /v1/sources/{id}", () => {
  it("answers the caller's source, as its create did, and 404 for another user's or an absent one", async () => {
    const u = await td.createUser();
    const other = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    const created = await createSource(u.api, { component_id: c.id, name: "one" });
    const res = await u.api.get(`/v1/sources/${created.id}`);
    expectStatus(res, 200);
    expect(res.body.data).toEqual(created);
    expectError(await other.api.get(`/v1/sources/${created.id}`), 404);
    expectError(await u.api.get(`/v1/sources/${absentId("dc_")}`), 404);
    expectError(await u.api.get("/v1/sources/not-an-id"), 404);
    expectError(await client(td.url).get(`/v1/sources/${created.id}`), 401);
  });
});
