/**
 * Promises a daemon creates per single emit: a count that does not depend on the host's speed
 * (unlike CPU per request on a shared machine), for the emit's hot path (docs/performance.md
 * "Promises per emit"). Starts the compiled daemon (this checkout, or the checkout given as the
 * first argument: `npx tsx bench/promises-per-emit.ts /tmp/other`) with bench/promise-hook.mjs,
 * sends 500 sequential emits to warm up, then counts over 2,000 more and prints the count per
 * emit and where the promises were made (sampled). Koa + EVALSHA (bench/baseline-child.ts) makes 14.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { request } from "undici";
import { startEmbeddedRedis } from "../src/redis/embedded.js";
import { ROOT } from "./child.js";
import { buildDaemon, createPaidUser, startDaemonProcess } from "./daemon-process.js";

const root = process.argv[2] ?? ROOT;
const WARMUP = 500;
const COUNTED = 2000;
buildDaemon(root);
const redis = await startEmbeddedRedis();
const adminToken = randomBytes(12).toString("hex");
const hook = path.join(ROOT, "bench/promise-hook.mjs");
const d = await startDaemonProcess({ redisUrl: redis.url, adminToken, root, flags: ["--import", hook] }, "daemon");
try {
  const apiKey = await createPaidUser(d.url, adminToken, "promises");
  const body = JSON.stringify({ event: { seq: 1, kind: "bench", msg: "hello from the bench", n: 42, ok: true } });
  const headers = { authorization: `Bearer ${apiKey}`, "content-type": "application/json" };
  const emit = async () => {
    const r = await request(`${d.url}/v1/workflows/p_promises/events`, { method: "POST", headers, body });
    await r.body.text();
    if (r.statusCode !== 202) throw new Error(`emit answered ${r.statusCode}`);
  };
  for (let i = 0; i < WARMUP; i++) await emit();
  process.kill(d.child.pid, "SIGUSR2");
  await new Promise((r) => setTimeout(r, 100));
  for (let i = 0; i < COUNTED; i++) await emit();
  process.kill(d.child.pid, "SIGUSR2");
  const file = `/tmp/tributary-promises-${d.child.pid}.json`;
  const deadline = Date.now() + 5000;
  let text: string | undefined;
  while (text === undefined && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    try {
      text = readFileSync(file, "utf8");
    } catch {}
  }
  if (text === undefined) throw new Error(`${file} was not written`);
  const res = JSON.parse(text) as { count: number; sites: [string, number][] };
  process.stdout.write(`promises per emit: ${(res.count / COUNTED).toFixed(2)} (${root})\nwhere (sampled, per emit):\n`);
  for (const [site, n] of res.sites.slice(0, 25)) process.stdout.write(`  ${(n / COUNTED).toFixed(2)}  ${site.slice(0, 240)}\n`);
} finally {
  await d.stop();
  await redis.close();
}
process.exit(0);
