import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BrowserPage, findChromium, openPage } from "../../../helpers/chromium.js";
import { client, startTestDaemon, type TestDaemon } from "../../../helpers/daemon.js";
import { waitFor } from "../../../helpers/wait.js";

/**
 * SPEC §10: `GET /docs` is a human-readable reference rendered from the OpenAPI document, served
 * entirely by the daemon. A real browser loads it: the endpoints appear on the page, and nothing
 * was requested from another host or refused by the Content-Security-Policy.
 */

let td: TestDaemon;

beforeAll(async () => {
  td = await startTestDaemon();
});

afterAll(async () => {
  await td?.close();
});

describe("the reference page's HTTP side", () => {
  it("serves the page unauthenticated with a CSP that names no other host", async () => {
    const res = await client(td.url).get("/docs");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    const csp = res.headers.get("content-security-policy") ?? "";
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).not.toMatch(/https?:|\*|'unsafe-eval'/);
    // Every script and stylesheet it names is one of the daemon's paths, and is served.
    const refs = [...res.text.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1] as string);
    expect(refs.length).toBeGreaterThanOrEqual(3);
    for (const ref of refs) {
      expect(ref, ref).toMatch(/^\/(?!\/)/);
      expect((await client(td.url).get(ref)).status, ref).toBe(200);
    }
  });

  it("answers an unknown asset with a JSON 404", async () => {
    for (const name of ["nope.js", "..%2Fpackage.json", "index.html", "__proto__"]) {
      const res = await client(td.url).get(`/docs/assets/${name}`);
      expect(res.status, name).toBe(404);
      expect(res.body.code).toBe("route_not_found");
    }
  });
});

const chromium = findChromium();
const ci = process.env.CI === "true";

describe("the reference page in a browser", () => {
  it("requires chromium in CI", () => {
    if (!chromium && !ci) return;
    expect(chromium, "chromium is not installed (.ci/run installs it)").toBeDefined();
  });

  it.skipIf(!chromium && !ci)(
    "renders every endpoint from the document, requesting nothing from another host",
    async () => {
      let page: BrowserPage | undefined;
      try {
        page = await openPage(chromium as string, `${td.url}/docs`);
        const opened = page;
        const text = await waitFor(
          async () => {
            const t = await opened.evaluate<string>("document.body ? document.body.innerText : ''");
            return t.includes("/v1/users/me/subscriptions") ? t : undefined;
          },
          { timeoutMs: 30_000, intervalMs: 200, what: "the reference to render the endpoints" },
        );
        const doc = (await client(td.url).get("/v1/openapi.json")).body as { paths: Record<string, unknown> };
        for (const path of Object.keys(doc.paths)) expect(text, path).toContain(path);
        expect(text).toContain("Tributary");

        const foreign = page.requests.filter((u) => !u.startsWith(`${td.url}/`) && !/^(data|blob|about):/.test(u));
        expect(foreign).toEqual([]);
        expect(page.requests).toContain(`${td.url}/v1/openapi.json`);
        const refused = page.messages.filter((m) => /Content Security Policy|Refused to/i.test(m));
        expect(refused).toEqual([]);
        expect(page.messages.filter((m) => m.startsWith("exception"))).toEqual([]);
      } finally {
        await page?.close();
      }
    },
    60_000,
  );
});
