import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BrowserPage, findChromium, openPage } from "../../helpers/chromium.js";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/wait.js";
import { createSource, type Loopback, loopbackServer } from "./support.js";

/**
 * A tenant's endpoint page in the operator's browser, in real headless Chromium: the operator opened
 * the queue dashboard (so the browser holds its cookie), then opens a page a tenant's custom
 * response serves. Its script tries to read another tenant's queued payload through the
 * dashboard's API and to change the queues; it must read nothing and change nothing. A page of the
 * same site (another port of the host: the cookie goes along) must not change the queues either,
 * while the dashboard's own page still can.
 */

const chromium = findChromium();
const ci = process.env.CI === "true";
const SECRET = "tenant-b-queued-payload";

let td: TestDaemon;
let admin: Client;
let sameSite: Loopback | undefined;

/** What the hostile page does; it writes its findings into the page and sets the title. */
function hostileScript(base: string, queue: string, jobId: string): string {
  return `(async () => {
  const out = {};
  const attempt = async (name, url, init) => {
    try {
      const r = await fetch(url, { credentials: "include", ...init });
      out[name] = r.type + " " + r.status + " " + (await r.text()).slice(0, 2000);
    } catch (e) {
      out[name] = "error " + e;
    }
  };
  try { out.cookie = document.cookie; } catch (e) { out.cookie = "throws " + e.name; }
  const api = ${JSON.stringify(`${base}/admin/queues/api/queues`)};
  await attempt("read", api + "?activeQueue=${queue}&status=delayed");
  await attempt("readJob", api + "/${queue}/${jobId}");
  await attempt("pause", api + "/${queue}/pause", { method: "PUT" });
  await attempt("remove", api + "/${queue}/${jobId}/clean", { method: "PUT" });
  await attempt("add", api + "/${queue}/add", {
    method: "POST",
    mode: "no-cors",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: "name=forged",
  });
  document.body.textContent = JSON.stringify(out);
  document.title = "hostile-done";
})();`;
}

const page = (script: string) =>
  `<!doctype html><html><head><title>tenant</title></head><body>loading<script>${script}</script></body></html>`;

/** A customResponse component answering `html`; it also tries to loosen the page's CSP. */
const tenantComponent = (html: string) => `module.exports = {
  name: "Tenant Page",
  version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run() {
    this.http.respond({
      status: 200,
      headers: { "content-type": "text/html; charset=utf-8", "content-security-policy": "default-src * 'unsafe-inline'" },
      body: ${JSON.stringify(html)},
    });
  },
};
`;

/** Adds a delayed job holding another tenant's payload, through the dashboard's API with the token. */
async function victimJob(queue: string): Promise<string> {
  const res = await admin.post(`/admin/queues/api/queues/${queue}/add`, {
    json: { name: "victim", data: { payload: SECRET }, options: { delay: 3_600_000 } },
  });
  expect(res.status, res.text).toBe(200);
  return String(res.body.job.id);
}

async function queueState(queue: string, jobId: string): Promise<{ paused: boolean; job: string; forged: number }> {
  const job = await admin.get(`/admin/queues/api/queues/${queue}/${jobId}`);
  const list = await admin.get(`/admin/queues/api/queues?activeQueue=${queue}&status=latest`);
  const q = (list.body.queues as { name: string; isPaused: boolean; jobs: { name: string }[] }[]).find((x) => x.name === queue);
  return {
    paused: q?.isPaused ?? true,
    job: job.status === 200 ? String(job.body.status) : `missing (${job.status})`,
    forged: (q?.jobs ?? []).filter((j) => j.name === "forged").length,
  };
}

const boardLoaded = (tab: BrowserPage) =>
  waitFor(async () => (await tab.evaluate<string>("location.pathname + ' ' + document.readyState")) === "/admin/queues complete", {
    timeoutMs: 30_000,
    intervalMs: 200,
    what: "the dashboard page to load",
  });

/** Opens the dashboard as an operator does: ?token= once, then the cookie. */
async function openBoard(binary: string): Promise<BrowserPage> {
  const tab = await openPage(binary, `${td.url}/admin/queues?token=${encodeURIComponent(td.adminToken)}`);
  await boardLoaded(tab);
  // The browser holds the cookie: the dashboard's API answers its own page.
  expect(await tab.evaluate<number>("fetch('/admin/queues/api/queues').then((r) => r.status)")).toBe(200);
  return tab;
}

async function findings(tab: BrowserPage): Promise<Record<string, string>> {
  await waitFor(async () => (await tab.evaluate<string>("document.title")) === "hostile-done", {
    timeoutMs: 30_000,
    intervalMs: 200,
    what: "the hostile page's script to finish",
  });
  return JSON.parse(await tab.evaluate<string>("document.body.textContent")) as Record<string, string>;
}

beforeAll(async () => {
  td = await startTestDaemon();
  admin = client(td.url, td.adminToken);
});

afterAll(async () => {
  await sameSite?.close();
  await td?.close();
});

describe("a tenant's endpoint page in the operator's browser", () => {
  it("requires chromium in CI", () => {
    if (!chromium && !ci) return;
    expect(chromium, "chromium is not installed (.ci/run installs it)").toBeDefined();
  });

  it.skipIf(!chromium && !ci)(
    "reads nothing of the queue dashboard and changes nothing, though the browser holds the dashboard's cookie",
    async () => {
      const queue = "maintenance";
      const jobId = await victimJob(queue);
      const tenant = await td.createUser();
      const source = await createSource(tenant.api, { component_code: tenantComponent(page(hostileScript("", queue, jobId))) });
      const endpoint = String(source.configured_props.http.endpoint_url);
      expect(endpoint.startsWith(`${td.url}/e/`)).toBe(true);
      let tab: BrowserPage | undefined;
      try {
        tab = await openBoard(chromium as string);
        await tab.navigate(endpoint);
        const out = await findings(tab);
        for (const name of ["read", "readJob"]) expect(out[name], name).not.toContain(SECRET);
        expect(await queueState(queue, jobId)).toEqual({ paused: false, job: "delayed", forged: 0 });
        // The script ran (it reported), in an opaque origin: no cookie jar, no answer it may read.
        expect(out.cookie).toMatch(/^throws/);
        for (const name of ["read", "readJob", "pause", "remove"]) expect(out[name], name).toMatch(/^error TypeError/);
        // The one request it can send (a no-cors form POST) goes without the cookie; its answer is opaque.
        expect(out.add).toMatch(/^opaque 0/);
      } finally {
        await tab?.close();
      }
    },
    90_000,
  );

  it.skipIf(!chromium && !ci)(
    "a page on another port of the host cannot change the queues with the cookie; the dashboard's own page can",
    async () => {
      const queue = "timers";
      const jobId = await victimJob(queue);
      sameSite = await loopbackServer((_req, res) => {
        res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
        res.end(page(hostileScript(td.url, queue, jobId)));
      });
      let tab: BrowserPage | undefined;
      try {
        tab = await openBoard(chromium as string);
        await tab.navigate(sameSite.url("/page"));
        const out = await findings(tab);
        // Same site: the cookie goes along, but a form POST is not enough to change anything.
        expect(out.add).toMatch(/^opaque 0/);
        for (const name of ["read", "readJob", "pause", "remove"]) expect(out[name], name).not.toContain(SECRET);
        expect(await queueState(queue, jobId)).toEqual({ paused: false, job: "delayed", forged: 0 });

        // The dashboard's own page still pauses and resumes a queue with the cookie alone.
        await tab.navigate(`${td.url}/admin/queues`);
        await boardLoaded(tab);
        const put = (action: string) =>
          tab?.evaluate<number>(`fetch('/admin/queues/api/queues/${queue}/${action}', { method: 'PUT' }).then((r) => r.status)`);
        expect(await put("pause")).toBe(200);
        expect((await queueState(queue, jobId)).paused).toBe(true);
        expect(await put("resume")).toBe(200);
        expect((await queueState(queue, jobId)).paused).toBe(false);
      } finally {
        await tab?.close();
      }
    },
    90_000,
  );
});
