import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../../src/redis/embedded.js";
import { createKeys } from "../../../src/store/keys.js";
import { RUN_GROUP, RunStream, runStreamLength } from "../../../src/store/run-stream.js";
import { childApi, createUserKey, type DaemonChild, killAll, spawnDaemon, waitForReady, waitWhileRunning } from "../../helpers/process.js";
import { waitFor } from "../../helpers/receiver.js";
import { connectRedis, dropPrefix, redisUrl, testPrefix } from "../../helpers/redis.js";

/**
 * At least once for queued source runs, with real processes: a `ROLES=worker` child SIGKILLed in
 * the middle of its runs leaves their run stream entries pending; another worker takes them over
 * once they have been idle past the run time limit plus a margin, and runs them again. Every
 * request the api answered 200 ends in a run.
 */

const ADMIN_TOKEN = `admin-${randomBytes(8).toString("hex")}`;
const CONCURRENCY = 4;
const REQUESTS = 8;
/** A run holds its fetch this long: the kill lands in the middle of the first runs. */
const HOLD_MS = 1500;

/** A loopback server that holds each request and records `?n=` of each arrival. */
async function startHoldingServer() {
  const arrivals: number[] = [];
  let inFlight = 0;
  let max = 0;
  const server: Server = createServer((req, res) => {
    arrivals.push(Number(new URL(req.url ?? "/", "http://x").searchParams.get("n")));
    max = Math.max(max, ++inFlight);
    const timer = setTimeout(() => {
      inFlight--;
      res.end("ok");
    }, HOLD_MS);
    req.on("close", () => {
      if (!res.writableEnded) {
        clearTimeout(timer);
        inFlight--;
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    arrivals,
    maxInFlight: () => max,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

describe("a worker killed in the middle of its source runs", () => {
  let prefix: string;
  let redis: Redis;
  let slow: Awaited<ReturnType<typeof startHoldingServer>>;

  beforeAll(async () => {
    prefix = testPrefix();
    redis = connectRedis();
    slow = await startHoldingServer();
  });

  afterEach(async () => {
    await killAll();
  });

  afterAll(async () => {
    await killAll();
    await slow?.close();
    if (redis) {
      await dropPrefix(redis, prefix);
      redis.disconnect();
    }
  });

  const env = (roles: string, port: number): Record<string, string> => ({
    REDIS_URL: redisUrl(),
    REDIS_KEY_PREFIX: prefix,
    ADMIN_TOKEN,
    PORT: String(port),
    HOST: "127.0.0.1",
    PUBLIC_URL: `http://127.0.0.1:${port}`,
    ROLES: roles,
    ALLOW_PRIVATE_DESTINATIONS: "true",
    SOURCE_HTTP_RATE_PER_SECOND: "1000",
    SOURCE_RUN_CONCURRENCY: String(CONCURRENCY),
    // Entries of a dead consumer are taken over after 3 s + the 5 s margin of idleness.
    SANDBOX_TIMEOUT_MS: "3000",
    LOG_LEVEL: "warn",
  });

  /** Consumers of the run stream's group (each worker registers one at start). */
  const consumers = async (): Promise<string[]> => {
    const list = (await redis.xinfo("CONSUMERS", createKeys(prefix).shardRuns(0), RUN_GROUP).catch(() => [])) as string[][];
    return list.map((c) => String(c[1]));
  };

  const startWorker = async (name: string): Promise<DaemonChild> => {
    const before = new Set(await consumers());
    const d = spawnDaemon(name, env("worker", 0));
    await waitWhileRunning(d, async () => (await consumers()).some((c) => !before.has(c)), `${name} reading the run stream`, 60_000);
    return d;
  };

  it("has its runs redone by another worker: every accepted request runs at least once", async () => {
    const api = spawnDaemon("api", env("api", await freePort()));
    await waitForReady(api, 60_000);
    const key = await createUserKey(api, ADMIN_TOKEN);
    const created = await childApi(api, key, "POST", "/v1/sources", {
      component_code: `module.exports = {
        name: "Holding", version: "0.0.1", props: { http: "$.interface.http" },
        async run(event) { await fetch(${JSON.stringify(slow.url)} + "?n=" + event.body.n); this.$emit({ n: event.body.n }); },
      };`,
    });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const source = created.body.data;
    for (let n = 0; n < REQUESTS; n++) {
      const res = await fetch(source.configured_props.http.endpoint_url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ n }),
      });
      expect(res.status).toBe(200);
    }
    const keys = createKeys(prefix);
    expect(await runStreamLength(redis, keys)).toBe(REQUESTS);

    const first = await startWorker("worker-1");
    await waitWhileRunning(first, async () => slow.arrivals.length >= CONCURRENCY, "the first runs to be under way");
    await first.kill("SIGKILL");
    const cut = [...slow.arrivals];
    expect(cut.length).toBe(CONCURRENCY);
    // Read by the dead consumer and never acknowledged.
    expect((await new RunStream(redis, keys, 1).stats()).pending).toBe(CONCURRENCY);

    const second = await startWorker("worker-2");
    const emitted = async () => {
      const res = await childApi(api, key, "GET", `/v1/sources/${source.id}/event_summaries?limit=100&expand=event`);
      return (res.body?.data ?? []).map((e: { event: { n: number } }) => e.event.n) as number[];
    };
    await waitWhileRunning(
      second,
      async () => new Set(await emitted()).size === REQUESTS,
      "every accepted request's run, the killed ones redone",
      90_000,
    );
    await waitFor(async () => (await runStreamLength(redis, keys)) === 0, { timeoutMs: 10_000, what: "the run stream to drain" });
    expect([...new Set(await emitted())].sort((a, b) => a - b)).toEqual(Array.from({ length: REQUESTS }, (_, n) => n));
    // The runs cut by the kill reached the holding server twice: once cut, once redone.
    for (const n of cut) expect(slow.arrivals.filter((a) => a === n).length, `run ${n}`).toBeGreaterThanOrEqual(2);
    expect(slow.maxInFlight()).toBeLessThanOrEqual(CONCURRENCY);
    expect((await new RunStream(redis, keys, 1).stats()).pending).toBe(0);
  }, 240_000);
});
