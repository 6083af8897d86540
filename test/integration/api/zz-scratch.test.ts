import { it } from "vitest";
import { startTestDaemon } from "../../helpers/daemon.js";
import { createComponent, HTTP_ESM } from "./support.js";
it("timing", async () => {
  const td = await startTestDaemon();
  const u = await td.createUser();
  const c = await createComponent(u.api, HTTP_ESM);
  const times: number[] = [];
  for (let i = 0; i < 30; i++) { const t = performance.now(); await u.api.post("/v1/sources", { json: { component_id: c.id } }); times.push(performance.now() - t); }
  const w: number[] = [];
  for (let i = 0; i < 30; i++) { const t = performance.now(); await u.api.post("/v1/webhooks", { query: { url: "https://e.com" } }); w.push(performance.now() - t); }
  console.log("src", Math.min(...times).toFixed(2), "wh", Math.min(...w).toFixed(2));
  const l = await u.api.get("/v1/users/me/webhooks", { query: { limit: 100 } });
  console.log(l.body.data.map((x: any) => x.created_at).join(","));
  await td.close();
});
