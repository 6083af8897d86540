import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { type Receiver, startReceiver } from "../../helpers/receiver.js";
import { connectRedis } from "../../helpers/redis.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * A large payload is stored once per event, whatever its number of waiting deliveries: the jobs and
 * attempt records of its deliveries refer to it, read it at attempt time, and free it once the last
 * of them is delivered; a failed one keeps it for its replay.
 */

const LISTENERS = 25;
const PAYLOAD_BYTES = 400_000;

let td: TestDaemon;
let redis: Redis;
let rx: Receiver;
/** Paths whose webhook answers 200; every other path answers 500. */
const healthy = new Set<string>();

beforeAll(async () => {
  rx = await startReceiver((req) => ({ status: healthy.has(req.path) ? 200 : 500 }));
  // Retries far apart (an hour), and no circuit in the way: every failed delivery waits as a job.
  td = await startTestDaemon({ DELIVERY_RETRY_SCHEDULE: "1h,1h", CIRCUIT_FAILURE_THRESHOLD: "1000000" });
  redis = connectRedis();
});

afterAll(async () => {
  redis?.disconnect();
  await td?.close();
  await rx?.close();
});

/** Bytes Redis holds for every key of the daemon's prefix (its users' keys and its queues'). */
async function bytesHeld(prefix: string): Promise<number> {
  let total = 0;
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000);
    cursor = next;
    for (const key of keys) total += Number((await redis.call("MEMORY", "USAGE", key, "SAMPLES", "0")) ?? 0);
  } while (cursor !== "0");
  return total;
}

async function payloadKeys(prefix: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", `${prefix}:*:payload:*`, "COUNT", 1000);
    cursor = next;
    found.push(...keys);
  } while (cursor !== "0");
  return found;
}

async function webhooksOn(api: Client, workflow: string, paths: readonly string[]): Promise<string[]> {
  const ids: string[] = [];
  for (const path of paths) {
    const w = await api.post("/v1/webhooks", { json: { url: rx.url(path) } });
    expect(w.status).toBe(200);
    const s = await api.post("/v1/subscriptions", { json: { emitter_id: workflow, listener_id: w.body.data.id } });
    expect(s.status).toBe(200);
    ids.push(w.body.data.id as string);
  }
  return ids;
}

const bigEvent = (tag: string) => ({ tag, blob: "x".repeat(PAYLOAD_BYTES) });

describe("payload sharing", () => {
  it("one 400 KB event to 25 failing webhooks holds its payload about once, not once per delivery", async () => {
    const u = await td.createUser("paid");
    const workflow = "p_payloadonce";
    const paths = Array.from({ length: LISTENERS }, (_, i) => `/fail-${i}`);
    const hooks = await webhooksOn(u.api, workflow, paths);
    const before = await bytesHeld(td.prefix);
    const res = await u.api.post(`/v1/workflows/${workflow}/events`, { json: { event: bigEvent("once") } });
    expect(res.status).toBe(202);
    // Every delivery made its first attempt (500) and waits for its retry, an hour away.
    await waitFor(() => paths.every((p) => rx.to(p).length === 1), { timeoutMs: 30_000 });
    await waitFor(
      async () => {
        const pending = await Promise.all(
          hooks.map(async (id) => (await u.api.get(`/v1/webhooks/${id}/deliveries`)).body.data?.[0]?.status === "pending"),
        );
        return pending.every(Boolean) && (await redis.zcard(`${td.prefix}:{bull}:delivery:delayed`)) >= LISTENERS;
      },
      { timeoutMs: 30_000 },
    );
    const grown = (await bytesHeld(td.prefix)) - before;
    // The summary stream keeps the event once and its stored payload once: about two copies, where
    // a copy per job and per record would be fifty.
    expect(grown).toBeLessThan(3 * PAYLOAD_BYTES);
    expect(await payloadKeys(td.prefix)).toHaveLength(1);
  });

  it("frees the stored payload when the webhook whose deliveries held it is deleted", async () => {
    const u = await td.createUser("paid");
    const workflow = "p_payloadgone";
    const [hook] = await webhooksOn(u.api, workflow, ["/gone-0"]);
    expect((await u.api.post(`/v1/workflows/${workflow}/events`, { json: { event: bigEvent("gone") } })).status).toBe(202);
    const mine = async () => (await payloadKeys(td.prefix)).filter((k) => k.includes(`:${u.id}:`));
    await waitFor(async () => (await u.api.get(`/v1/webhooks/${hook}/deliveries`)).body.data?.[0]?.status === "pending", {
      timeoutMs: 30_000,
    });
    await waitFor(async () => (await mine()).length === 1, { timeoutMs: 30_000 });
    expect((await u.api.del(`/v1/webhooks/${hook}`)).status).toBeLessThan(300);
    await waitFor(async () => (await mine()).length === 0, { timeoutMs: 30_000 });
  });

  it("sends the stored payload on a retry, frees it once every delivery is delivered, and keeps it for a replay", async () => {
    const u = await td.createUser("paid");
    const workflow = "p_payloadlife";
    const paths = ["/life-a", "/life-b", "/life-c"];
    const hooks = await webhooksOn(u.api, workflow, paths);
    const event = bigEvent("life");
    expect((await u.api.post(`/v1/workflows/${workflow}/events`, { json: { event } })).status).toBe(202);
    await waitFor(() => paths.every((p) => rx.to(p).length === 1), { timeoutMs: 30_000 });
    const failedOrPending = async (id: string) => (await u.api.get(`/v1/webhooks/${id}/deliveries`)).body.data?.[0];
    await waitFor(async () => (await Promise.all(hooks.map(failedOrPending))).every((d) => d?.status === "pending"), {
      timeoutMs: 30_000,
    });
    const before = (await payloadKeys(td.prefix)).filter((k) => k.includes(`:${u.id}:`));
    expect(before).toHaveLength(1);

    // The first two webhooks recover; their retries (promoted now instead of in an hour) read the stored payload.
    healthy.add("/life-a");
    healthy.add("/life-b");
    const { Queue } = await import("bullmq");
    const queue = new Queue("delivery", { connection: redis, prefix: `${td.prefix}:{bull}` });
    try {
      for (const id of hooks.slice(0, 2)) {
        const d = await failedOrPending(id);
        await (await queue.getJob(d.id))?.promote();
      }
      await waitFor(() => rx.to("/life-a").length === 2 && rx.to("/life-b").length === 2, { timeoutMs: 30_000 });
      for (const p of ["/life-a", "/life-b"]) expect(rx.to(p)[1]?.json).toEqual(event);
      await waitFor(async () => (await Promise.all(hooks.slice(0, 2).map(failedOrPending))).every((d) => d?.status === "delivered"), {
        timeoutMs: 30_000,
      });
      // The third still waits: the payload stays.
      expect((await payloadKeys(td.prefix)).filter((k) => k.includes(`:${u.id}:`))).toHaveLength(1);

      // The third gives up (its job is removed and it is marked failed as BullMQ would), then is replayed.
      const third = await failedOrPending(hooks[2] as string);
      await (await queue.getJob(third.id))?.remove();
      const recordKey = `${before[0]?.split(":payload:")[0]}:delivery:${third.id}`;
      const record = JSON.parse((await redis.get(recordKey)) ?? "{}");
      expect(record.payload).toBe("");
      expect(record.payload_key).toBe(before[0]);
      await redis.set(recordKey, JSON.stringify({ ...record, status: "failed" }), "XX");
      healthy.add("/life-c");
      const retried = await u.api.post(`/v1/webhooks/${hooks[2]}/deliveries/${third.id}/retry`);
      expect(retried.status).toBeLessThan(300);
      await waitFor(() => rx.to("/life-c").length === 2, { timeoutMs: 30_000 });
      expect(rx.to("/life-c")[1]?.json).toEqual(event);
      // Its last holder delivered: the stored payload is gone.
      await waitFor(async () => (await payloadKeys(td.prefix)).filter((k) => k.includes(`:${u.id}:`)).length === 0, {
        timeoutMs: 30_000,
      });
    } finally {
      await queue.close();
    }
  });
});
