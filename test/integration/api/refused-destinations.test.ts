import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";
import { storeWebhookUrl } from "../../helpers/stored-destination.js";
import {
  createSource,
  createWebhook,
  emit,
  expectError,
  HTTP_ESM,
  type Loopback,
  loopbackServer,
  subscribe,
  workflowId,
} from "./support.js";

/**
 * The SSRF guard's refusals reach users in three places: a component_url error, a delivery's
 * attempt log and the error a source's own fetch() throws. None of them names the address a host
 * name resolved to (that would map the operator's network for whoever asks); they say the
 * destination was refused. `localhost` resolves to 127.0.0.1 and ::1 here, which must not show.
 */

const ADDRESS = /127\.0\.0\.1|::1|resolves to/;

let guarded: TestDaemon;
let target: Loopback;

beforeAll(async () => {
  [guarded, target] = await Promise.all([
    startTestDaemon({ ALLOW_PRIVATE_DESTINATIONS: "false" }),
    loopbackServer((_req, res) => res.end(HTTP_ESM)),
  ]);
});

afterAll(async () => {
  await Promise.all([guarded?.close(), target?.close()]);
});

const localhostUrl = (path: string) => target.url(path).replace("127.0.0.1", "localhost");

describe("refused destinations", () => {
  it("refuses a webhook url or trigger_url that names a private address or localhost when it is stored, naming the rule", async () => {
    const u = await guarded.createUser();
    const refused = [
      "http://127.0.0.1:9/hook",
      "http://127.1/hook",
      "http://2130706433/hook",
      "http://localhost:9/hook",
      "http://LOCALHOST./hook",
      "http://api.localhost/hook",
      "http://10.1.2.3/hook",
      "http://192.168.0.10/hook",
      "http://169.254.169.254/latest/meta-data",
      "http://0.0.0.0/hook",
      "http://[::1]/hook",
      "http://[::ffff:127.0.0.1]/hook",
      "http://[fe80::1]/hook",
      "http://[fd00::1]/hook",
    ];
    for (const url of refused) {
      const res = await u.api.post("/v1/webhooks", { json: { url } });
      expectError(
        res,
        400,
        /^url names .*; this daemon does not deliver to loopback, private or link-local destinations \(ALLOW_PRIVATE_DESTINATIONS is off\)$/,
      );
    }
    const hook = await createWebhook(u.api, "https://receiver.example/hook");
    const put = await u.api.put(`/v1/webhooks/${hook.id}`, { json: { url: "http://[::1]:8080/x" } });
    expectError(put, 400, /url names ::1, a loopback, private or link-local address/);
    expect((await u.api.get(`/v1/webhooks/${hook.id}`)).body.data.url).toBe("https://receiver.example/hook");
    const trigger = await u.api.put(`/v1/workflows/${workflowId()}`, { json: { trigger_url: "http://localhost/flow" } });
    expectError(trigger, 400, /trigger_url names localhost, a loopback name/);
    // Names are judged where they resolve, at connect time; public literals pass.
    for (const url of [
      "https://hooks.example.com/x",
      "http://93.184.216.34/x",
      "http://[2606:4700::1111]/x",
      "http://localhost.example/x",
    ]) {
      const res = await u.api.post("/v1/webhooks", { json: { url } });
      expect(res.status, `${url}: ${res.text}`).toBe(200);
    }
  });

  it("answers a component_url on a name that resolves to loopback with a 400 that names no address", async () => {
    const u = await guarded.createUser();
    const res = await u.api.post("/v1/components", { json: { component_url: localhostUrl("/c.js") } });
    expectError(res, 400, /component_url could not be fetched: destination refused/);
    expect(res.text).not.toMatch(ADDRESS);
    expect(target.hits).toEqual([]);
  });

  it("records a refused delivery in the attempt log without the address", async () => {
    const u = await guarded.createUser();
    // Stored before the API refused localhost (the guard judges every name where it resolves).
    const hook = await createWebhook(u.api, "https://receiver.example/hook");
    await storeWebhookUrl(guarded, u.id, hook.id, localhostUrl("/hook"));
    const p = workflowId();
    await subscribe(u.api, p, hook.id);
    await emit(u.api, p, { probe: true });
    const delivery = await waitFor(async () => {
      const res = await u.api.get(`/v1/webhooks/${hook.id}/deliveries`);
      return res.body?.data?.[0]?.status === "failed" ? res.body.data[0] : undefined;
    });
    const error: string = delivery.attempts[0].error;
    expect(error).toMatch(/destination refused/);
    expect(error).not.toMatch(ADDRESS);
    expect(target.hits).toEqual([]);
  });

  it("gives a source's fetch() an error that names no address", async () => {
    const u = await guarded.createUser();
    const code = `module.exports = {
      name: "Prober",
      version: "0.0.1",
      props: { http: "$.interface.http" },
      async run() {
        try { await fetch(${JSON.stringify(localhostUrl("/probe"))}); this.$emit({ reached: true }); }
        catch (err) { this.$emit({ message: String(err && err.message) }); }
      },
    };`;
    const source = await createSource(u.api, { component_code: code });
    const anon = await fetch(source.configured_props.http.endpoint_url, { method: "POST" });
    expect(anon.status).toBe(200);
    const event = await waitFor(async () => {
      const res = await u.api.get(`/v1/sources/${source.id}/event_summaries`, { query: { expand: "event" } });
      return res.body?.data?.[0]?.event;
    });
    expect(event.message).toMatch(/destination refused/);
    expect(event.message).not.toMatch(ADDRESS);
    expect(target.hits).toEqual([]);
  });
});
