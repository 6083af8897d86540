import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../../src/redis/embedded.js";
import { client } from "../../helpers/daemon.js";
import { killAll, spawnDaemon, startRedisServer, waitForReady } from "../../helpers/process.js";
import { type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";

/**
 * A stalled Redis (the process stopped with SIGSTOP: its TCP connections stay open and nothing
 * answers, as with a frozen VM or dropped packets) must not hang the API: requests answer 503
 * within the command timeout, /readyz within its own deadline, and once Redis resumes the same
 * daemon serves again and delivers what it acknowledged before, without a restart.
 */

const ADMIN_TOKEN = `admin-${randomBytes(8).toString("hex")}`;
/** REDIS_COMMAND_TIMEOUT_MS given to the daemon. */
const COMMAND_TIMEOUT_MS = 1000;
/** How long Redis stays stopped: far longer than any bound asserted below. */
const STALL_MS = 10_000;
/** What a request may take during the stall: the timeout plus room for a loaded machine. */
const REQUEST_BOUND_MS = COMMAND_TIMEOUT_MS + 4000;
/** /readyz answers within 1.5 s by design; room for a loaded machine. */
const READYZ_BOUND_MS = 4000;

let dataDir: string;
let rx: Receiver;
/** Event ids the receiver has answered 200. */
const delivered = new Set<string>();
const failedOnce = new Set<string>();

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), "tributary-stall-"));
  // Every event's first attempt fails, so an event acknowledged before the stall is still waiting
  // for its retry while Redis is stopped.
  rx = await startReceiver((req) => {
    const id = String(req.headers["x-tributary-event-id"]);
    if (!failedOnce.has(id)) {
      failedOnce.add(id);
      return { status: 500 };
    }
    delivered.add(id);
    return { status: 200 };
  });
});

afterAll(async () => {
  await killAll();
  await rx?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

interface Timed {
  status: number;
  body: { error?: string; code?: string; data?: unknown } | undefined;
  ms: number;
}

/** One request, timed; a request still unanswered after 30 s counts as status 0. */
async function timed(url: string, init: { method?: string; key?: string; json?: unknown } = {}): Promise<Timed> {
  const started = Date.now();
  const headers: Record<string, string> = {};
  if (init.key) headers.authorization = `Bearer ${init.key}`;
  if (init.json !== undefined) headers["content-type"] = "application/json";
  try {
    const res = await fetch(url, {
      method: init.method ?? "GET",
      headers,
      body: init.json === undefined ? undefined : JSON.stringify(init.json),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined, ms: Date.now() - started };
  } catch {
    return { status: 0, body: undefined, ms: Date.now() - started };
  }
}

describe("a stalled Redis (SIGSTOP)", () => {
  it("answers 503 within the command timeout while Redis is stopped, and serves again and delivers once it resumes", async () => {
    const redis = await startRedisServer({ dir: path.join(dataDir, "redis"), port: await freePort(), appendfsync: "always" });
    const port = await freePort();
    const daemon = spawnDaemon("daemon", {
      REDIS_URL: redis.url,
      REDIS_KEY_PREFIX: `stall${randomBytes(3).toString("hex")}`,
      REDIS_COMMAND_TIMEOUT_MS: String(COMMAND_TIMEOUT_MS),
      ADMIN_TOKEN,
      PORT: String(port),
      HOST: "127.0.0.1",
      ALLOW_PRIVATE_DESTINATIONS: "true",
      DELIVERY_RETRY_SCHEDULE: "1s,1s,1s,1s,1s,1s,1s,1s,1s,1s",
      LOG_LEVEL: "warn",
    });
    await waitForReady(daemon);
    const admin = client(daemon.url, ADMIN_TOKEN);
    const user = await admin.post("/admin/users", { json: { username: "stall", email: "stall@example.com", plan: "paid" } });
    expect(user.status, user.text).toBe(201);
    const key = user.body.data.api_key as string;
    const api = client(daemon.url, key);
    const hook = await api.post("/v1/webhooks", { json: { url: rx.url("/stall"), name: "stall" } });
    expect(hook.status, hook.text).toBe(200);
    const sub = await api.post("/v1/subscriptions", { json: { emitter_id: "p_stall", listener_id: hook.body.data.id } });
    expect(sub.status, sub.text).toBe(200);
    const emitUrl = `${daemon.url}/v1/workflows/p_stall/events`;

    // Acknowledged before the stall; its first attempt fails, so it is still due when Redis stops.
    const before = await api.post("/v1/workflows/p_stall/events", { json: { event: { n: "before" } } });
    expect(before.status, before.text).toBe(202);
    const beforeId = before.body.data.id as string;
    await waitFor(() => failedOnce.has(beforeId), {
      timeoutMs: 20_000,
      what: "the first attempt of the event acknowledged before the stall",
    });

    // The resume is on a timer of its own: requests that hang must not keep Redis stopped.
    const stoppedAt = Date.now();
    process.kill(redis.pid, "SIGSTOP");
    const resume = new Promise<void>((resolve) =>
      setTimeout(() => {
        process.kill(redis.pid, "SIGCONT");
        resolve();
      }, STALL_MS),
    );
    try {
      const [emit, readyz, me] = await Promise.all([
        timed(emitUrl, { method: "POST", key, json: { event: { n: "during" } } }),
        timed(`${daemon.url}/readyz`),
        timed(`${daemon.url}/v1/users/me`, { key }),
      ]);
      // A second request after the first timed out: the connection is still up, and still stalled.
      const emitAgain = await timed(emitUrl, { method: "POST", key, json: { events: [{ event: { n: "during-2" } }] } });
      const stalledFor = Date.now() - stoppedAt;
      expect(stalledFor, "the requests must be answered while Redis is still stopped").toBeLessThan(STALL_MS);
      for (const [what, r, bound] of [
        ["emit", emit, REQUEST_BOUND_MS],
        ["second emit", emitAgain, REQUEST_BOUND_MS],
        ["/v1/users/me", me, REQUEST_BOUND_MS],
      ] as const) {
        expect({ what, status: r.status, code: r.body?.code }).toEqual({ what, status: 503, code: "unavailable" });
        expect(typeof r.body?.error, what).toBe("string");
        expect(r.ms, `${what} answered after ${r.ms} ms`).toBeLessThan(bound);
      }
      expect(readyz.status).toBe(503);
      expect(readyz.ms, `/readyz answered after ${readyz.ms} ms`).toBeLessThan(READYZ_BOUND_MS);
      expect(daemon.hasExited(), daemon.logs()).toBe(false);
    } finally {
      await resume;
    }

    // Resumed: the same process serves again, and what it acknowledged gets delivered.
    await waitForReady(daemon, 30_000);
    expect(daemon.hasExited()).toBe(false);
    const meAfter = await api.get("/v1/users/me");
    expect(meAfter.status, meAfter.text).toBe(200);
    const after = await api.post("/v1/workflows/p_stall/events", { json: { event: { n: "after" } } });
    expect(after.status, after.text).toBe(202);
    const afterId = after.body.data.id as string;
    await waitFor(() => delivered.has(beforeId) && delivered.has(afterId), {
      timeoutMs: 60_000,
      intervalMs: 100,
      what: "delivery of the events acknowledged before and after the stall",
    }).catch((err: Error) => {
      throw new Error(`${err.message}\n--- daemon logs ---\n${daemon.logs()}`);
    });
  }, 150_000);
});

describe("a Redis already stalled when the daemon starts", () => {
  it("says that Redis does not answer instead of hanging, and starts once Redis resumes", async () => {
    const redis = await startRedisServer({ dir: path.join(dataDir, "redis-start"), port: await freePort(), appendfsync: "everysec" });
    process.kill(redis.pid, "SIGSTOP");
    let resumed = false;
    try {
      const daemon = spawnDaemon("daemon-stalled-start", {
        REDIS_URL: redis.url,
        REDIS_KEY_PREFIX: `stallstart${randomBytes(3).toString("hex")}`,
        ADMIN_TOKEN,
        PORT: String(await freePort()),
        HOST: "127.0.0.1",
        LOG_LEVEL: "warn",
      });
      // Each first-contact attempt gives up after its deadline and says why (it used to wait forever, silently).
      await waitFor(() => daemon.logs().includes("did not answer within"), { timeoutMs: 30_000, what: "the stalled-Redis warning" });
      process.kill(redis.pid, "SIGCONT");
      resumed = true;
      await waitForReady(daemon, 60_000);
      expect((await timed(`${daemon.url}/readyz`)).status).toBe(200);
    } finally {
      if (!resumed) process.kill(redis.pid, "SIGCONT");
    }
  }, 120_000);
});
