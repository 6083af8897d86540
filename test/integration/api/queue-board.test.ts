import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QUEUES } from "../../../src/queue/catalog.js";
import { client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { expectError } from "./support.js";

/**
 * The queue dashboard (bull-board) at /admin/queues: the admin guard's rules (404 without
 * ADMIN_TOKEN, 401 without the token), the browser's way in (?token= once, then a cookie), and
 * the page and its JSON API showing the daemon's queues.
 */

let td: TestDaemon;
let noAdmin: TestDaemon;

beforeAll(async () => {
  [td, noAdmin] = await Promise.all([startTestDaemon(), startTestDaemon({ ADMIN_TOKEN: "" })]);
});

afterAll(async () => {
  await Promise.all([td?.close(), noAdmin?.close()]);
});

const get = (base: string, path: string, headers: Record<string, string> = {}) =>
  fetch(base + path, { headers, redirect: "manual" }).then(async (res) => {
    const text = await res.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    return { status: res.status, headers: res.headers, text, body: body as { error?: string; code?: string } & Record<string, unknown> };
  });

describe("the queue dashboard's guard", () => {
  it("answers 404 on every dashboard path when ADMIN_TOKEN is unset", async () => {
    for (const path of ["/admin/queues", "/admin/queues/api/queues", "/admin/queues?token=x", "/ADMIN/Queues"]) {
      const res = await get(noAdmin.url, path, { authorization: "Bearer anything" });
      expectError(res, 404);
    }
  });

  it("answers 401 without the token, with a wrong token, and with a forged cookie", async () => {
    const cases: [string, Record<string, string>][] = [
      ["/admin/queues", {}],
      ["/admin/queues/api/queues", {}],
      ["/admin/queues/static/js/nothing.js", {}],
      ["/admin/queues", { authorization: "Bearer wrong" }],
      ["/admin/queues?token=wrong", {}],
      ["/admin/queues", { cookie: `tributary_admin=${td.adminToken}` }],
      ["/admin/queues", { cookie: "tributary_admin=forged" }],
      ["/aDmin/queues/api/queues", {}],
      ["//admin/queues/api/queues", {}],
    ];
    for (const [path, headers] of cases) {
      const res = await get(td.url, path, headers);
      expectError(res, 401);
      expect(res.headers.get("set-cookie"), path).toBeNull();
    }
  });

  it("takes the token once from ?token=, sets an HttpOnly SameSite=Strict cookie for /admin/queues and drops the token from the URL", async () => {
    const res = await get(td.url, `/admin/queues?token=${encodeURIComponent(td.adminToken)}&x=1`);
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/admin/queues?x=1");
    const cookie = res.headers.get("set-cookie") ?? "";
    expect(cookie).toMatch(/^tributary_admin=[^;]+;/);
    expect(cookie).toMatch(/; path=\/admin\/queues(;|$)/i);
    expect(cookie).toMatch(/; httponly/i);
    expect(cookie).toMatch(/; samesite=strict/i);
    // The cookie is not the token itself.
    const value = /^tributary_admin=([^;]+)/.exec(cookie)?.[1] ?? "";
    expect(value).not.toBe(td.adminToken);
    expect(value).not.toContain(td.adminToken);

    const page = await get(td.url, "/admin/queues", { cookie: `tributary_admin=${value}` });
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/text\/html/);
    const api = await get(td.url, "/admin/queues/api/queues", { cookie: `tributary_admin=${value}` });
    expect(api.status).toBe(200);
    // The cookie opens the dashboard only, not the admin API.
    expectError(await get(td.url, "/admin/users", { cookie: `tributary_admin=${value}` }), 401);
  });

  it("redirects a doubled leading slash to a path on this host, never a protocol-relative URL", async () => {
    const res = await get(td.url, `//admin/queues?token=${encodeURIComponent(td.adminToken)}`);
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/admin/queues");
  });
});

describe("the queue dashboard's cookie and calls that change queues", () => {
  let cookie = "";
  beforeAll(async () => {
    const res = await get(td.url, `/admin/queues?token=${encodeURIComponent(td.adminToken)}`);
    cookie = (res.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
    expect(cookie).toMatch(/^tributary_admin=/);
  });
  const pause = (headers: Record<string, string>) =>
    fetch(`${td.url}/admin/queues/api/queues/maintenance/pause`, { method: "PUT", headers, redirect: "manual" });
  const resume = () =>
    fetch(`${td.url}/admin/queues/api/queues/maintenance/resume`, { method: "PUT", headers: { authorization: `Bearer ${td.adminToken}` } });
  const paused = async () => {
    const res = await get(td.url, "/admin/queues/api/queues", { authorization: `Bearer ${td.adminToken}` });
    return ((res.body as { queues: { name: string; isPaused: boolean }[] }).queues ?? []).find((q) => q.name === "maintenance")?.isPaused;
  };

  it.each([
    ["another site (Sec-Fetch-Site: same-site)", { "sec-fetch-site": "same-site", origin: "http://127.0.0.1:1" }],
    ["an opaque origin (Sec-Fetch-Site: cross-site)", { "sec-fetch-site": "cross-site", origin: "null" }],
    ["a user's navigation (Sec-Fetch-Site: none)", { "sec-fetch-site": "none" }],
    ["another origin over plain HTTP (Origin only)", { origin: "http://127.0.0.1:1" }],
    ["an opaque origin over plain HTTP (Origin: null)", { origin: "null" }],
    ["no browser's headers at all", {}],
  ])("answers 403 to a cookie call from %s, and changes nothing", async (_what, headers) => {
    const res = await pause({ cookie, ...headers });
    expect(res.status).toBe(403);
    const body = (await res.json()) as { error?: string; code?: string };
    expect(body.code).toBe("cross_origin_request");
    expect(body.error).toMatch(/Bearer/);
    expect(await paused()).toBe(false);
  });

  it.each([
    ["Sec-Fetch-Site: same-origin", { "sec-fetch-site": "same-origin" }],
    ["its own Origin over plain HTTP", { origin: "" }],
  ])("takes a cookie call from the dashboard's own page (%s)", async (_what, headers) => {
    const h: Record<string, string> = { cookie, ...headers };
    if (h.origin === "") h.origin = td.url;
    const res = await pause(h);
    expect(res.status).toBe(200);
    expect(await paused()).toBe(true);
    expect((await resume()).status).toBe(200);
  });

  it("reads with the cookie alone, and takes the Bearer header from anywhere (scripts)", async () => {
    expect((await get(td.url, "/admin/queues/api/queues", { cookie, "sec-fetch-site": "same-origin" })).status).toBe(200);
    const res = await pause({ authorization: `Bearer ${td.adminToken}`, "sec-fetch-site": "cross-site", origin: "null" });
    expect(res.status).toBe(200);
    expect(await paused()).toBe(true);
    expect((await resume()).status).toBe(200);
    expect(await paused()).toBe(false);
  });
});

describe("the queue dashboard", () => {
  const bearer = () => ({ authorization: `Bearer ${td.adminToken}` });

  it("serves its page from the daemon, with a CSP that allows no other host", async () => {
    const res = await get(td.url, "/admin/queues", bearer());
    expect(res.status).toBe(200);
    expect(res.text).toContain("Tributary queues");
    const csp = res.headers.get("content-security-policy") ?? "";
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toMatch(/https?:|\*/);
    // Its scripts are served too (relative to the page's <base>).
    const script = /<script[^>]+src="([^"]+)"/.exec(res.text)?.[1];
    expect(script).toBeDefined();
    const js = await get(td.url, `/admin/queues/${script}`, bearer());
    expect(js.status).toBe(200);
    expect(js.headers.get("content-type")).toMatch(/javascript/);
  });

  it("lists every queue of the catalog in its JSON API", async () => {
    const res = await get(td.url, "/admin/queues/api/queues", bearer());
    expect(res.status).toBe(200);
    const names = ((res.body as { queues?: { name: string }[] }).queues ?? []).map((q) => q.name).sort();
    expect(names).toEqual(Object.values(QUEUES).sort());
  });

  it("answers an unknown dashboard path with the daemon's JSON 404", async () => {
    const res = await get(td.url, "/admin/queues/api/no-such-thing/at/all", bearer());
    expectError(res, 404);
  });

  it("refuses a wrong method with a JSON 405 or 404, never a 5xx", async () => {
    const res = await fetch(`${td.url}/admin/queues/api/queues`, { method: "DELETE", headers: bearer() });
    expect([404, 405]).toContain(res.status);
    const body = (await res.json()) as { error?: unknown; code?: unknown };
    expect(typeof body.error).toBe("string");
    expect(typeof body.code).toBe("string");
  });

  it("leaves the admin API as it was", async () => {
    const res = await client(td.url, td.adminToken).get("/admin/users");
    expect(res.status).toBe(200);
  });
});
