import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENDPOINT_ANSWER_HEADERS } from "../../../../src/domain/custom-response.js";
import { freePort } from "../../../../src/redis/embedded.js";
import { client, startTestDaemon, type TestDaemon } from "../../../helpers/daemon.js";
import { waitFor } from "../../../helpers/wait.js";
import { createSource, HTTP_ESM, type Json } from "../support.js";

/**
 * What every answer of an endpoint path carries (a sandbox CSP, nosniff, no-referrer), whoever wrote
 * it: a custom response that tries to set its own, the default `{success: true}`, the daemon's
 * errors. And endpoints on an origin of their own: ENDPOINT_URL in the sources' `endpoint_url`,
 * ENDPOINT_PORT a listener that serves endpoints and nothing else.
 */

/** A customResponse source answering HTML and trying to set the daemon's own headers and a cookie. */
const OVERRIDER = `module.exports = {
  name: "Header Overrider",
  version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) {
    if (event.path === "/silent") return;
    this.http.respond({
      status: 201,
      headers: {
        "Content-Type": "text/html; charset=utf-8",
        "Content-Security-Policy": "default-src *",
        "x-content-type-options": "",
        "Referrer-Policy": "unsafe-url",
        "Set-Cookie": "tributary_admin=planted; Path=/admin/queues",
        "x-kept": "yes",
      },
      body: "<!doctype html><p>tenant page</p>",
    });
  },
};
`;

let td: TestDaemon;
let split: TestDaemon;
let endpointPort: number;

beforeAll(async () => {
  endpointPort = await freePort();
  [td, split] = await Promise.all([
    startTestDaemon(),
    startTestDaemon({ ENDPOINT_PORT: String(endpointPort), ENDPOINT_URL: `http://127.0.0.1:${endpointPort}` }),
  ]);
});

afterAll(async () => {
  await Promise.all([td?.close(), split?.close()]);
});

function expectEndpointHeaders(res: Response, what: string): void {
  for (const [name, value] of Object.entries(ENDPOINT_ANSWER_HEADERS)) expect(res.headers.get(name), `${what}: ${name}`).toBe(value);
  expect(res.headers.get("set-cookie"), what).toBeNull();
}

async function endpointOf(d: TestDaemon, code: string, extra: Record<string, unknown> = {}): Promise<string> {
  const u = await d.createUser();
  const source = (await createSource(u.api, { component_code: code, ...extra })) as Json;
  return String(source.configured_props.http.endpoint_url);
}

describe("every answer of an endpoint path", () => {
  it("a custom response keeps its content and its other headers, never its own CSP, nosniff, Referrer-Policy or cookie", async () => {
    const url = await endpointOf(td, OVERRIDER);
    const res = await fetch(`${url}/page`);
    expect(res.status).toBe(201);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(res.headers.get("x-kept")).toBe("yes");
    expect(await res.text()).toContain("tenant page");
    expectEndpointHeaders(res, "custom response");
  });

  it("the default answer and the daemon's own errors carry them too", async () => {
    const queued = await endpointOf(td, HTTP_ESM);
    const custom = await endpointOf(td, OVERRIDER);
    const verified = await endpointOf(td, HTTP_ESM, { configured_props: { http: { auth: { type: "token", token: "s3cret-token" } } } });
    const cases: [string, string, RequestInit, number][] = [
      ["queued", queued, { method: "POST", body: "{}" }, 200],
      ["unknown token", `${td.url}/e/NoSuchToken123`, {}, 404],
      ["bare /e", `${td.url}/e`, {}, 404],
      ["malformed token", `${td.url}/e/!`, {}, 404],
      ["too large", queued, { method: "POST", body: "x".repeat(600 * 1024) }, 413],
      ["unverified", verified, { method: "POST", body: "{}" }, 401],
      ["no respond()", `${custom}/silent`, {}, 502],
    ];
    for (const [what, url, init, status] of cases) {
      const res = await fetch(url, init);
      expect(res.status, what).toBe(status);
      expectEndpointHeaders(res, what);
      await res.arrayBuffer();
    }
  });

  it("other paths of the daemon are not sandboxed (the dashboard and /docs are the daemon's own pages)", async () => {
    const res = await fetch(`${td.url}/docs`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-security-policy")).not.toContain("sandbox");
    await res.arrayBuffer();
  });
});

describe("ENDPOINT_URL and ENDPOINT_PORT", () => {
  it("sources' endpoint_url is built from ENDPOINT_URL, and the endpoints' listener serves them", async () => {
    const url = await endpointOf(split, HTTP_ESM);
    expect(url).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:${endpointPort}/e/[A-Za-z0-9]+$`));
    expect(split.daemon.endpointPort).toBe(endpointPort);
    const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: '{"via":"endpoint port"}' });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ success: true });
    expectEndpointHeaders(res, "endpoint listener");
    const custom = await fetch(`${await endpointOf(split, OVERRIDER)}/page`);
    expect(custom.status).toBe(201);
    expectEndpointHeaders(custom, "endpoint listener, custom response");
    await custom.arrayBuffer();
  });

  it("the endpoints' listener serves nothing else: the dashboard, the API, the docs and the ops routes are unknown there", async () => {
    const base = `http://127.0.0.1:${endpointPort}`;
    const paths = ["/admin/queues", "/admin/queues/api/queues", "/admin/users", "/v1/users/me", "/docs", "/healthz", "/metrics", "/"];
    for (const path of paths) {
      for (const key of [undefined, split.adminToken]) {
        const res = await client(base, key).get(path);
        expect(res.status, path).toBe(404);
        expect(res.body?.code, path).toBe("route_not_found");
        expect(res.headers.get("content-security-policy"), path).toBe(ENDPOINT_ANSWER_HEADERS["content-security-policy"]);
      }
    }
    expect((await client(base).get(`/admin/queues?token=${split.adminToken}`)).headers.get("set-cookie")).toBeNull();
  });

  it("the main listener keeps serving endpoints (URLs given out before), and the dashboard stays there", async () => {
    const url = await endpointOf(split, HTTP_ESM);
    const onMain = url.replace(`http://127.0.0.1:${endpointPort}`, split.url);
    const res = await fetch(onMain, { method: "POST", body: "{}" });
    expect(res.status).toBe(200);
    expectEndpointHeaders(res, "main listener");
    await res.arrayBuffer();
    expect((await client(split.url, split.adminToken).get("/admin/queues/api/queues")).status).toBe(200);
  });

  it("closes the endpoints' listener at shutdown", async () => {
    const port = await freePort();
    const d = await startTestDaemon({ ENDPOINT_PORT: String(port), ENDPOINT_URL: `http://127.0.0.1:${port}` });
    expect((await fetch(`http://127.0.0.1:${port}/e/NoSuchToken123`)).status).toBe(404);
    await d.close();
    await waitFor(
      async () => {
        try {
          await fetch(`http://127.0.0.1:${port}/e/NoSuchToken123`);
          return false;
        } catch {
          return true;
        }
      },
      { timeoutMs: 10_000, what: "the endpoints' listener to refuse connections" },
    );
  });
});
