import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../../../src/redis/embedded.js";
import { childApi, createUserKey, type DaemonChild, killAll, spawnDaemon, waitForReady } from "../../../helpers/process.js";
import { waitFor } from "../../../helpers/receiver.js";
import { connectRedis, dropPrefix, redisUrl, testPrefix } from "../../../helpers/redis.js";
import type { Json } from "../support.js";

/**
 * One line of component code used to end the daemon: V8 could not contain these built-in calls
 * (a fatal error, or an out-of-memory isolated-vm reports as catastrophic, after which the
 * process must end). The prelude now refuses them with a RangeError (guest-lengths.ts). The
 * daemon runs as a child process so that a regression shows as its exit signal, not as vitest
 * going down: each vector at a component's top level must be a 400 naming the limit, and inside a
 * source run an error on the source's $errors, with the daemon still serving.
 */

const ADMIN_TOKEN = `admin-${randomBytes(8).toString("hex")}`;
const LIMITED = /arrays are limited to \d+ elements in the sandbox/;
const BIG_STRING = "let s = 'x'; for (let i = 0; i < 28; i++) s += s;";

/** The vectors: code, and whether it also ended the daemon while a component was only loaded. */
const VECTORS: { name: string; code: string; atLoad: boolean }[] = [
  { name: "new Array(2e8).fill(1)", code: "new Array(2e8).fill(1);", atLoad: true },
  { name: "a huge length, then fill()", code: "const a = []; a.length = 2e8; a.fill(0);", atLoad: true },
  { name: "split('') of a 2^28-character string", code: `${BIG_STRING} s.split("");`, atLoad: false },
];

let d: DaemonChild;
let key: string;
let prefix: string;

beforeAll(async () => {
  prefix = testPrefix();
  d = spawnDaemon("vectors", {
    REDIS_URL: redisUrl(),
    REDIS_KEY_PREFIX: prefix,
    ADMIN_TOKEN,
    PORT: String(await freePort()),
    HOST: "127.0.0.1",
    SANDBOX_MEMORY_MB: "32",
    SANDBOX_TIMEOUT_MS: "15000",
    SHUTDOWN_TIMEOUT_MS: "1000",
    LOG_LEVEL: "warn",
  });
  await waitForReady(d);
  key = await createUserKey(d, ADMIN_TOKEN);
}, 60_000);

afterAll(async () => {
  await killAll();
  const redis = connectRedis();
  await dropPrefix(redis, prefix);
  redis.disconnect();
});

/** The daemon is alive and serving: readiness, and a healthy source's run recorded. */
async function expectServing(): Promise<void> {
  expect(d.hasExited(), d.logs()).toBe(false);
  expect((await fetch(`${d.url}/readyz`)).status, d.logs()).toBe(200);
  const code = `module.exports = { name: "healthy", props: { http: "$.interface.http" }, async run(e) { this.$emit({ n: e.body.n }); } };`;
  const s = await childApi(d, key, "POST", "/v1/sources", { component_code: code });
  expect(s.status, JSON.stringify(s.body)).toBe(200);
  const n = Math.random();
  expect((await fetch(s.body.data.configured_props.http.endpoint_url, { method: "POST", body: JSON.stringify({ n }) })).status).toBe(200);
  await waitFor(
    async () => {
      const r = await childApi(d, key, "GET", `/v1/sources/${s.body.data.id}/event_summaries?expand=event`);
      return r.body?.data?.some((e: Json) => e.event?.n === n);
    },
    { timeoutMs: 30_000, what: "the healthy source's emit" },
  );
}

describe("component code that used to end the daemon", () => {
  it.each(VECTORS.filter((v) => v.atLoad))(
    "answers 400 for $name at a component's top level, and keeps serving",
    async ({ code }) => {
      const res = await childApi(d, key, "POST", "/v1/components", {
        component_code: `${code}\nmodule.exports = { name: "boom", async run() {} };`,
      });
      expect(res.status, `${JSON.stringify(res.body)}\n${d.logs()}`).toBe(400);
      expect(res.body.error).toMatch(/^invalid component: the code threw while loading: Invalid array length/);
      expect(res.body.error).toMatch(LIMITED);
      await expectServing();
    },
    60_000,
  );

  it.each(VECTORS)(
    "ends a source run that does $name with an error on the source's error channel, and keeps serving",
    async ({ code }) => {
      const component = `module.exports = { name: "boom", props: { http: "$.interface.http" }, async run() { ${code} } };`;
      const s = await childApi(d, key, "POST", "/v1/sources", { component_code: component });
      expect(s.status, JSON.stringify(s.body)).toBe(200);
      expect((await fetch(s.body.data.configured_props.http.endpoint_url, { method: "POST", body: "{}" })).status).toBe(200);
      const errors = await waitFor(
        async () => {
          if (d.hasExited()) return "the daemon exited";
          const r = await childApi(d, key, "GET", `/v1/sources/${s.body.data.id}/event_summaries?event_name=%24errors&expand=event`);
          return r.body?.data?.length > 0 ? r.body.data : undefined;
        },
        { timeoutMs: 60_000, what: "the run's $errors record" },
      );
      expect(errors, d.logs()).not.toBe("the daemon exited");
      const error = errors[0].event.error;
      // split() is cut one element past the limit; the memory limit may come first.
      if (error.code !== "MEMORY_LIMIT") {
        expect(error.code).toBe("RangeError");
        expect(error.msg).toMatch(/arrays are limited to \d+ elements|the sandbox's limit for an array/);
      }
      await expectServing();
    },
    90_000,
  );
});
