import { randomBytes } from "node:crypto";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { freePort } from "../../../../src/redis/embedded.js";
import { childApi, createUserKey, type DaemonChild, killAll, spawnDaemon, waitForReady } from "../../../helpers/process.js";
import { waitFor } from "../../../helpers/receiver.js";
import { connectRedis, dropPrefix, redisUrl, testPrefix } from "../../../helpers/redis.js";
import type { Json } from "../support.js";

/**
 * isolated-vm's catastrophic error (V8 lost control of an isolate; the process hosting it must
 * end) may no longer end the daemon: the isolates run in a sandbox process of their own
 * (runtime/sandbox/process-sandbox.ts). A Set grown until the memory runs out is a real catastrophe
 * (V8 doubles the Set's table in one allocation, which fails past the heap's limit; no prelude can
 * bound it, see guest-lengths.ts). These tests run the daemon as a child process, so that a
 * regression shows as its exit signal, and cause one in the metadata sandbox (creating a component)
 * and in the runtime's sandbox (a source run): the request gets its answer, the daemon logs the
 * crash and keeps serving from a fresh sandbox process. Before the sandbox process, the daemon
 * aborted (SIGABRT) in both.
 */

const ADMIN_TOKEN = `admin-${randomBytes(8).toString("hex")}`;
const CATASTROPHE = "const s = new Set(); for (let i = 0; ; i++) s.add(i)";
const prefixes: string[] = [];

afterEach(async () => {
  await killAll();
});

afterAll(async () => {
  const redis = connectRedis();
  for (const p of prefixes) await dropPrefix(redis, p);
  redis.disconnect();
});

async function startDaemon(name: string): Promise<DaemonChild> {
  const prefix = testPrefix();
  prefixes.push(prefix);
  const d = spawnDaemon(name, {
    REDIS_URL: redisUrl(),
    REDIS_KEY_PREFIX: prefix,
    ADMIN_TOKEN,
    PORT: String(await freePort()),
    HOST: "127.0.0.1",
    SANDBOX_MEMORY_MB: "32",
    SHUTDOWN_TIMEOUT_MS: "1000",
    LOG_LEVEL: "warn",
  });
  await waitForReady(d);
  return d;
}

const CRASH_LOGGED = /"level":50.*V8 lost control of an isolate in the sandbox process/;

/** The daemon is alive, logged nothing at fatal level, and a healthy source's run is recorded. */
async function expectServing(d: DaemonChild, key: string): Promise<void> {
  expect(d.hasExited(), d.logs()).toBe(false);
  expect(d.logs()).not.toMatch(/"level":60/);
  const code = `module.exports = { name: "healthy", props: { http: "$.interface.http" }, async run(e) { this.$emit({ n: e.body.n }); } };`;
  const s = await childApi(d, key, "POST", "/v1/sources", { component_code: code });
  expect(s.status, JSON.stringify(s.body)).toBe(200);
  const n = Math.random();
  await fetch(s.body.data.configured_props.http.endpoint_url, { method: "POST", body: JSON.stringify({ n }) });
  await waitFor(
    async () =>
      (await childApi(d, key, "GET", `/v1/sources/${s.body.data.id}/event_summaries?expand=event`)).body?.data?.some(
        (e: Json) => e.event?.n === n,
      ),
    { timeoutMs: 30_000, what: "the healthy source's emit" },
  );
}

// On a starved CPU the memory limit's clean disposal (or the time limit) can come before V8 loses
// control: each case is tried until the daemon has logged a sandbox crash (a few attempts at most).
const ATTEMPTS = 5;

describe("a catastrophic isolated-vm error", () => {
  it("answers 400 when it happens while reading a component's metadata, and the daemon keeps serving", async () => {
    const d = await startDaemon("meta");
    const key = await createUserKey(d, ADMIN_TOKEN);
    for (let attempt = 1; !CRASH_LOGGED.test(d.logs()); attempt++) {
      expect(attempt, `no catastrophe in ${ATTEMPTS} attempts:\n${d.logs()}`).toBeLessThanOrEqual(ATTEMPTS);
      const res = await childApi(d, key, "POST", "/v1/components", {
        component_code: `${CATASTROPHE}; module.exports = { name: "boom", async run() {} };`,
      });
      expect(res.status, `${JSON.stringify(res.body)}\n${d.logs()}`).toBe(400);
      // A starved CPU can also reach the 1 s loading limit first.
      expect(res.body).toEqual({
        error: expect.stringMatching(
          /^invalid component: the code (used more than 32 MB while loading|did not finish loading within 1000 ms)$/,
        ),
        code: "invalid_parameter",
      });
      // The sandbox process that lost an isolate ends (and is logged) once its work is done.
      await new Promise((r) => setTimeout(r, 1000));
    }
    await expectServing(d, key);
  }, 120_000);

  it("ends a source run it happens in with MEMORY_LIMIT on $errors, and the daemon keeps serving", async () => {
    const d = await startDaemon("run");
    const key = await createUserKey(d, ADMIN_TOKEN);
    const code = `module.exports = { name: "boom", props: { http: "$.interface.http" }, async run() { ${CATASTROPHE}; } };`;
    const s = await childApi(d, key, "POST", "/v1/sources", { component_code: code });
    expect(s.status).toBe(200);
    for (let attempt = 1; ; attempt++) {
      expect(attempt, `no catastrophe in ${ATTEMPTS} attempts:\n${d.logs()}`).toBeLessThanOrEqual(ATTEMPTS);
      await fetch(s.body.data.configured_props.http.endpoint_url, { method: "POST", body: "{}" });
      const errors = await waitFor(
        async () => {
          if (d.hasExited()) return "the daemon exited";
          const r = await childApi(d, key, "GET", `/v1/sources/${s.body.data.id}/event_summaries?event_name=%24errors&expand=event`);
          return r.body?.data?.length >= attempt ? r.body.data : undefined;
        },
        { timeoutMs: 60_000, what: `$errors record ${attempt}` },
      );
      expect(errors, d.logs()).not.toBe("the daemon exited");
      // Newest first.
      const error = errors[0].event.error;
      expect(error.code).toBe("MEMORY_LIMIT");
      if (/in a way V8 could not contain/.test(error.msg)) break;
    }
    await waitFor(() => CRASH_LOGGED.test(d.logs()), { timeoutMs: 30_000, what: "the crash logged" });
    await expectServing(d, key);
  }, 180_000);
});
