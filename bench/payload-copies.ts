/**
 * `npx tsx bench/payload-copies.ts`: how much Redis memory large payloads hold while their
 * deliveries wait. 20 emits of a 400 KB event to 25 webhooks whose receiver answers 500, with the
 * default retry schedule: Redis `used_memory` before the emits and once every delivery has made
 * its first attempt and waits for its retry. Knobs: PAYLOAD_EMITS (20), PAYLOAD_LISTENERS (25),
 * PAYLOAD_BYTES (400000).
 */
import { createServer } from "node:http";
import { Redis } from "ioredis";
import { startEmbeddedRedis } from "../src/redis/embedded.js";
import { apiData, buildDaemon, createPaidUser, startDaemonProcess } from "./daemon-process.js";
import { fmt, sleep } from "./stats.js";

const envInt = (k: string, d: number) => {
  const v = Number(process.env[k]);
  return Number.isInteger(v) && v > 0 ? v : d;
};
const EMITS = envInt("PAYLOAD_EMITS", 20);
const LISTENERS = envInt("PAYLOAD_LISTENERS", 25);
const BYTES = envInt("PAYLOAD_BYTES", 400_000);

async function usedMemory(redis: Redis): Promise<number> {
  return Number(/^used_memory:(\d+)/m.exec(await redis.info("memory"))?.[1] ?? 0);
}

let attempts = 0;
const receiver = createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    attempts++;
    res.writeHead(500, { "content-length": "0" });
    res.end();
  });
});
await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
const port = (receiver.address() as { port: number }).port;

buildDaemon();
const redisServer = await startEmbeddedRedis();
const redis = new Redis(redisServer.url);
const adminToken = "bench-admin-payload-copies";
const daemon = await startDaemonProcess({
  redisUrl: redisServer.url,
  adminToken,
  env: { DELIVERY_RETRY_SCHEDULE: "5s,5m,30m,2h,5h,10h,10h", CIRCUIT_FAILURE_THRESHOLD: "1000000" },
});
try {
  const key = await createPaidUser(daemon.url, adminToken, "payloads");
  for (let i = 0; i < LISTENERS; i++) {
    const hook = await apiData<{ id: string }>(daemon.url, key, "POST", "/v1/webhooks", { url: `http://127.0.0.1:${port}/h${i}` }, 200);
    await apiData(daemon.url, key, "POST", "/v1/subscriptions", { emitter_id: "p_payloads", listener_id: hook.id }, 200);
  }
  const before = await usedMemory(redis);
  const blob = "x".repeat(BYTES);
  for (let i = 0; i < EMITS; i++) await apiData(daemon.url, key, "POST", "/v1/workflows/p_payloads/events", { event: { i, blob } }, 202);
  const deadline = Date.now() + 60_000;
  while (attempts < EMITS * LISTENERS && Date.now() < deadline) await sleep(200);
  // First attempts made; the retries wait 5 s (the first step of the schedule), then 5 minutes.
  await sleep(1000);
  const after = await usedMemory(redis);
  process.stdout.write(
    `${EMITS} emits of ${fmt(BYTES)} B to ${LISTENERS} failing webhooks (${attempts} attempts): used_memory ${fmt(before / 1e6, 1)} MB -> ${fmt(after / 1e6, 1)} MB (+${fmt((after - before) / 1e6, 1)} MB, ${fmt((after - before) / (EMITS * BYTES), 1)} copies of each payload)\n`,
  );
} finally {
  await daemon.stop();
  redis.disconnect();
  await redisServer.close();
  receiver.close();
}
