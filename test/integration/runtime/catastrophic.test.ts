import { randomBytes } from "node:crypto";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { freePort } from "../../../src/redis/embedded.js";
import { type DaemonChild, killAll, spawnDaemon, waitForReady } from "../../helpers/process.js";
import { connectRedis, dropPrefix, redisUrl, testPrefix } from "../../helpers/redis.js";

/**
 * isolated-vm's onCatastrophicError (V8 lost control of an isolate) must end the process, as
 * isolated-vm documents, so the supervisor starts a healthy one. A Set grown until the memory
 * runs out is a real catastrophe (V8 doubles the Set's table in one allocation, which fails past
 * the heap's limit, and its out-of-memory handler fires instead of the memory limit's clean
 * disposal; no prelude can bound it, see guest-lengths.ts), so these tests run the daemon as a
 * child process and cause one: in the metadata sandbox (creating the component) and in the
 * runtime's sandbox (a source run).
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

async function userKey(d: DaemonChild): Promise<string> {
  const tag = randomBytes(4).toString("hex");
  const res = await fetch(`${d.url}/admin/users`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ username: `u${tag}`, email: `u${tag}@example.com` }),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { data: { api_key: string } }).data.api_key;
}

/** The child ends by abort() within the drain deadline, having logged the fatal line. */
async function expectAborted(d: DaemonChild): Promise<void> {
  const exit = await Promise.race([d.exited, new Promise<"running">((r) => setTimeout(() => r("running"), 20_000))]);
  expect(exit, d.logs()).toEqual({ code: null, signal: "SIGABRT" });
  expect(d.logs()).toMatch(/"level":60.*isolated-vm lost control of an isolate/);
}

describe("a catastrophic isolated-vm error", () => {
  it("ends the process when it happens while reading a component's metadata", async () => {
    const d = await startDaemon("meta");
    const key = await userKey(d);
    // The request never gets an answer: the process goes away under it.
    void fetch(`${d.url}/v1/components`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ component_code: `${CATASTROPHE}; module.exports = { name: "boom", async run() {} };` }),
    }).catch(() => {});
    await expectAborted(d);
  }, 60_000);

  it("ends the process when it happens in a source run", async () => {
    const d = await startDaemon("run");
    const key = await userKey(d);
    const code = `module.exports = { name: "boom", props: { http: "$.interface.http" }, async run() { ${CATASTROPHE}; } };`;
    const res = await fetch(`${d.url}/v1/sources`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ component_code: code }),
    });
    expect(res.status).toBe(200);
    const source = (await res.json()) as { data: { configured_props: { http: { endpoint_url: string } } } };
    void fetch(source.data.configured_props.http.endpoint_url, { method: "POST", body: "{}" }).catch(() => {});
    await expectAborted(d);
  }, 60_000);
});
