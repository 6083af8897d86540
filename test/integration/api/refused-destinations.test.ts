import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";
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
  it("answers a component_url on a name that resolves to loopback with a 400 that names no address", async () => {
    const u = await guarded.createUser();
    const res = await u.api.post("/v1/components", { json: { component_url: localhostUrl("/c.js") } });
    expectError(res, 400, /component_url could not be fetched: destination refused/);
    expect(res.text).not.toMatch(ADDRESS);
    expect(target.hits).toEqual([]);
  });

  it("records a refused delivery in the attempt log without the address", async () => {
    const u = await guarded.createUser();
    const hook = await createWebhook(u.api, localhostUrl("/hook"));
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
