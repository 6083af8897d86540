import { afterAll, beforeAll, expect, it } from "vitest";
import { client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";
let td: TestDaemon;
beforeAll(async () => { td = await startTestDaemon({ SANDBOX_TIMEOUT_MS: "2000" }); });
afterAll(async () => { await td?.close(); });
it("probe", async () => {
  const a = await td.createUser();
  const loop = (await a.api.post("/v1/sources", { json: { component_code: `module.exports = { name: "L", props: { http: { type: "$.interface.http", customResponse: true } }, async run() { for(;;){} } };` } })).body.data;
  const b = await td.createUser();
  const ok = (await b.api.post("/v1/sources", { json: { component_code: `module.exports = { name: "H", props: { http: "$.interface.http" }, async run(e) { this.$emit({ok:1}); } };` } })).body.data;
  const anon = client(td.url);
  // warm
  await anon.post(ok.configured_props.http.endpoint_url, { json: {} });
  await waitFor(async () => (await b.api.get(`/v1/sources/${ok.id}/event_summaries`)).body.data.length === 1);
  const flood = Array.from({ length: 20 }, () => anon.post(loop.configured_props.http.endpoint_url, { json: {} }));
  await new Promise((r) => setTimeout(r, 100));
  const t0 = Date.now();
  await anon.post(ok.configured_props.http.endpoint_url, { json: {} });
  await waitFor(async () => (await b.api.get(`/v1/sources/${ok.id}/event_summaries`)).body.data.length === 2, { timeoutMs: 20000 });
  console.log("bystander latency ms", Date.now() - t0);
  const st = (await Promise.all(flood)).map((r) => r.status);
  console.log(st.join(","));
  expect(1).toBe(1);
});
